/* cfrac.c — cfrac-like: the continued-fraction expansion at the heart of
 * Morrison and Brillhart's CFRAC factoring (Dave Barrett's cfrac is the
 * classic allocator benchmark of Zorn and Grunwald, and of mimalloc-bench),
 * on heap bignums that every operation allocates afresh and its caller frees:
 * a stream of small (12-40 B), short-lived blocks.  Each step of the
 * expansion of sqrt(N) computes the next residue Q with a long division, and
 * Q is trial-divided by a factor base of small primes, each division
 * allocating its quotient; fully factored residues are CFRAC's "relations".
 * One thread.
 * usage: cfrac [-n STEPS] [-s SEED] */
#include "../workloads/wl.h"

struct num { uint32_t len; uint32_t d[]; };   /* limbs, least significant first; no zero top limb */

static struct num *nnew(uint32_t len)
{
    struct num *a = wl_malloc(sizeof *a + (size_t)(len ? len : 1) * 4);
    a->len = len;
    return a;
}

static struct num *trim(struct num *a)
{
    while (a->len && !a->d[a->len - 1])
        a->len--;
    return a;
}

static struct num *nfrom(uint64_t v)
{
    struct num *a = nnew(2);
    a->d[0] = (uint32_t)v;
    a->d[1] = (uint32_t)(v >> 32);
    return trim(a);
}

static struct num *ncopy(const struct num *a)
{
    struct num *r = nnew(a->len);
    memcpy(r->d, a->d, (size_t)a->len * 4);
    return r;
}

static int ncmp(const struct num *a, const struct num *b)
{
    if (a->len != b->len)
        return a->len < b->len ? -1 : 1;
    for (uint32_t i = a->len; i--;)
        if (a->d[i] != b->d[i])
            return a->d[i] < b->d[i] ? -1 : 1;
    return 0;
}

static struct num *nadd(const struct num *a, const struct num *b)
{
    if (a->len < b->len) {
        const struct num *t = a;
        a = b;
        b = t;
    }
    struct num *r = nnew(a->len + 1);
    uint64_t c = 0;
    for (uint32_t i = 0; i < a->len; i++) {
        c += (uint64_t)a->d[i] + (i < b->len ? b->d[i] : 0);
        r->d[i] = (uint32_t)c;
        c >>= 32;
    }
    r->d[a->len] = (uint32_t)c;
    return trim(r);
}

static struct num *nsub(const struct num *a, const struct num *b)      /* a >= b */
{
    struct num *r = nnew(a->len);
    int64_t borrow = 0;
    for (uint32_t i = 0; i < a->len; i++) {
        int64_t t = (int64_t)a->d[i] - (i < b->len ? b->d[i] : 0) - borrow;
        borrow = t < 0;
        r->d[i] = (uint32_t)t;
    }
    return trim(r);
}

static struct num *nmul(const struct num *a, const struct num *b)
{
    struct num *r = nnew(a->len + b->len);
    memset(r->d, 0, (size_t)r->len * 4);
    for (uint32_t i = 0; i < a->len; i++) {
        uint64_t c = 0;
        for (uint32_t j = 0; j < b->len; j++) {
            c += (uint64_t)a->d[i] * b->d[j] + r->d[i + j];
            r->d[i + j] = (uint32_t)c;
            c >>= 32;
        }
        r->d[i + b->len] = (uint32_t)c;
    }
    return trim(r);
}

static struct num *ndivsmall(const struct num *a, uint32_t m, uint32_t *rem)
{
    struct num *q = nnew(a->len);
    uint64_t r = 0;
    for (uint32_t i = a->len; i--;) {
        uint64_t cur = r << 32 | a->d[i];
        q->d[i] = (uint32_t)(cur / m);
        r = cur % m;
    }
    *rem = (uint32_t)r;
    return trim(q);
}

/* Knuth's algorithm D (TAOCP 4.3.1): quotient, and the remainder in *rem. */
static struct num *ndivmod(const struct num *u, const struct num *v, struct num **rem)
{
    if (v->len == 1) {
        uint32_t r;
        struct num *q = ndivsmall(u, v->d[0], &r);
        *rem = nfrom(r);
        return q;
    }
    if (ncmp(u, v) < 0) {
        *rem = ncopy(u);
        return nnew(0);
    }
    uint32_t n = v->len, m = u->len, s = (uint32_t)__builtin_clz(v->d[n - 1]);
    uint32_t *vn = wl_malloc((size_t)n * 4), *un = wl_malloc((size_t)(m + 1) * 4);
    for (uint32_t i = n - 1; i > 0; i--)
        vn[i] = v->d[i] << s | (s ? v->d[i - 1] >> (32 - s) : 0);
    vn[0] = v->d[0] << s;
    un[m] = s ? u->d[m - 1] >> (32 - s) : 0;
    for (uint32_t i = m - 1; i > 0; i--)
        un[i] = u->d[i] << s | (s ? u->d[i - 1] >> (32 - s) : 0);
    un[0] = u->d[0] << s;
    struct num *q = nnew(m - n + 1);
    for (uint32_t j = m - n + 1; j--;) {
        uint64_t top = (uint64_t)un[j + n] << 32 | un[j + n - 1];
        uint64_t qhat = top / vn[n - 1], rhat = top % vn[n - 1];
        while (qhat >> 32 || qhat * vn[n - 2] > (rhat << 32 | un[j + n - 2])) {
            qhat--;
            rhat += vn[n - 1];
            if (rhat >> 32)
                break;
        }
        int64_t borrow = 0, t;
        for (uint32_t i = 0; i < n; i++) {
            uint64_t p = qhat * vn[i];
            t = (int64_t)un[i + j] - borrow - (int64_t)(p & 0xffffffffu);
            un[i + j] = (uint32_t)t;
            borrow = (int64_t)(p >> 32) - (t >> 32);
        }
        t = (int64_t)un[j + n] - borrow;
        un[j + n] = (uint32_t)t;
        q->d[j] = (uint32_t)qhat;
        if (t < 0) {                        /* subtracted once too often: add back */
            q->d[j]--;
            uint64_t c = 0;
            for (uint32_t i = 0; i < n; i++) {
                c += (uint64_t)un[i + j] + vn[i];
                un[i + j] = (uint32_t)c;
                c >>= 32;
            }
            un[j + n] += (uint32_t)c;
        }
    }
    struct num *r = nnew(n);
    for (uint32_t i = 0; i < n; i++)
        r->d[i] = un[i] >> s | (s ? un[i + 1] << (32 - s) : 0);
    free(vn);
    free(un);
    *rem = trim(r);
    return trim(q);
}

static struct num *ndiv(const struct num *u, const struct num *v)
{
    struct num *r, *q = ndivmod(u, v, &r);
    free(r);
    return q;
}

static struct num *nmod(const struct num *u, const struct num *v)
{
    struct num *r;
    free(ndivmod(u, v, &r));
    return r;
}

/* floor(sqrt(n)) by Newton's iteration from above. */
static struct num *nsqrt(const struct num *n)
{
    uint32_t bits = 32 * n->len - (uint32_t)__builtin_clz(n->d[n->len - 1]);
    struct num *x = nnew(bits / 64 + 1);
    memset(x->d, 0, (size_t)x->len * 4);
    x->d[(bits / 2 + 1) / 32] = 1u << ((bits / 2 + 1) % 32);
    trim(x);
    for (;;) {
        struct num *q = ndiv(n, x), *sum = nadd(x, q);
        uint32_t odd;
        struct num *y = ndivsmall(sum, 2, &odd);
        free(q);
        free(sum);
        if (ncmp(y, x) >= 0) {
            free(y);
            return x;
        }
        free(x);
        x = y;
    }
}

#define NPRIMES 60

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "ns", "[-n STEPS] [-s SEED]");
    long steps = wl_lopt(argc, argv, "-n", 1000000);
    uint64_t seed = (uint64_t)wl_lopt(argc, argv, "-s", 1);
    uint32_t primes[NPRIMES];
    for (uint32_t c = 2, k = 0; k < NPRIMES; c++) {
        uint32_t d = 2;
        while (d * d <= c && c % d)
            d++;
        if (d * d > c)
            primes[k++] = c;
    }
    /* N: a 124-bit product of two odd numbers, not a square. */
    struct num *f1 = nfrom(0xfffffffffffffc5ull >> 1 | 1), *f2 = nfrom((1ull << 61) + 2 * seed + 1);
    struct num *N = nmul(f1, f2), *g = nsqrt(N);
    free(f1);
    free(f2);
    /* P_0 = 0, Q_0 = 1, a_0 = g; convergent numerators A_-1 = 1, A_0 = g. */
    struct num *P = nnew(0), *Q = nfrom(1), *a = ncopy(g), *A1 = nfrom(1), *A = ncopy(g);
    unsigned long long relations = 0, check = 0;
    for (long i = 0; i < steps; i++) {
        struct num *aq = nmul(a, Q), *Pn = nsub(aq, P);            /* P' = a Q - P */
        struct num *pp = nmul(Pn, Pn), *diff = nsub(N, pp);
        struct num *Qn = ndiv(diff, Q);                             /* Q' = (N - P'^2) / Q */
        struct num *gp = nadd(g, Pn), *an = ndiv(gp, Qn);           /* a' = (g + P') / Q' */
        struct num *aA = nmul(an, A), *sum = nadd(aA, A1), *An = nmod(sum, N);  /* A' = a' A + A_prev mod N */
        free(aq); free(pp); free(diff); free(gp); free(aA); free(sum);
        free(P); free(Q); free(a); free(A1);
        P = Pn; Q = Qn; a = an; A1 = A; A = An;
        /* Trial division of Q by the factor base. */
        struct num *r = ncopy(Q);
        for (int k = 0; k < NPRIMES && r->len; k++) {
            for (;;) {
                uint32_t rem;
                struct num *qt = ndivsmall(r, primes[k], &rem);
                if (rem) {
                    free(qt);
                    break;
                }
                free(r);
                r = qt;
            }
        }
        if (r->len == 1 && r->d[0] == 1) {
            relations++;
            check = check * 31 + (A->len ? A->d[0] : 0);
        }
        check ^= (unsigned long long)(Q->len ? Q->d[0] : 0) << (i & 31);
        free(r);
    }
    free(P); free(Q); free(a); free(A1); free(A); free(g); free(N);
    fprintf(stderr, "cfrac: %llu relations in %ld steps\n", relations, steps);
    wl_result((unsigned long long)steps, check ^ relations);
    return 0;
}
