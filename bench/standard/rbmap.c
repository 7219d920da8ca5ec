/* rbmap.c — lean-like: the persistent red-black map of Lean's benchmarks
 * (Lean is one of mimalloc-bench's big programs, and the runtime mimalloc
 * was written for).  Nodes are reference counted and immutable: an insert
 * copies the path from the root (Okasaki's balance), sharing the rest, and
 * dropping the previous version frees the nodes only it held.  Every 100th
 * version is kept as a checkpoint until 10,000 more inserts have gone by,
 * so some paths live long.  Keys fall in 0..99,999, so the map stays near
 * 100,000 nodes of 40 B.  One thread.
 * usage: rbmap [-n INSERTS] [-s SEED] */
#include "../workloads/wl.h"

enum { RED, BLACK };
struct node { uint32_t rc, color; uint64_t key, val; struct node *l, *r; };

static struct node *mk(uint32_t color, struct node *l, uint64_t key, uint64_t val, struct node *r)
{
    struct node *n = wl_malloc(sizeof *n);        /* takes over the references l and r */
    *n = (struct node){ 1, color, key, val, l, r };
    return n;
}

static struct node *inc(struct node *n)
{
    if (n)
        n->rc++;
    return n;
}

static void dec(struct node *n)
{
    while (n && --n->rc == 0) {
        struct node *r = n->r;
        dec(n->l);
        free(n);
        n = r;
    }
}

static int red(const struct node *n) { return n && n->color == RED; }

/* Okasaki's balance of a black node with a red child and grandchild;
 * consumes l and r. */
static struct node *balance(uint32_t color, struct node *l, uint64_t k, uint64_t v, struct node *r)
{
    struct node *n;
    if (color == BLACK && red(l) && red(l->l)) {
        n = mk(RED, mk(BLACK, inc(l->l->l), l->l->key, l->l->val, inc(l->l->r)), l->key, l->val,
               mk(BLACK, inc(l->r), k, v, r));
        dec(l);
    } else if (color == BLACK && red(l) && red(l->r)) {
        n = mk(RED, mk(BLACK, inc(l->l), l->key, l->val, inc(l->r->l)), l->r->key, l->r->val,
               mk(BLACK, inc(l->r->r), k, v, r));
        dec(l);
    } else if (color == BLACK && red(r) && red(r->l)) {
        n = mk(RED, mk(BLACK, l, k, v, inc(r->l->l)), r->l->key, r->l->val,
               mk(BLACK, inc(r->l->r), r->key, r->val, inc(r->r)));
        dec(r);
    } else if (color == BLACK && red(r) && red(r->r)) {
        n = mk(RED, mk(BLACK, l, k, v, inc(r->l)), r->key, r->val,
               mk(BLACK, inc(r->r->l), r->r->key, r->r->val, inc(r->r->r)));
        dec(r);
    } else {
        n = mk(color, l, k, v, r);
    }
    return n;
}

/* A new version with key k set to v; t is only read. */
static struct node *ins(const struct node *t, uint64_t k, uint64_t v)
{
    if (!t)
        return mk(RED, NULL, k, v, NULL);
    if (k < t->key)
        return balance(t->color, ins(t->l, k, v), t->key, t->val, inc(t->r));
    if (k > t->key)
        return balance(t->color, inc(t->l), t->key, t->val, ins(t->r, k, v));
    return mk(t->color, inc(t->l), k, v, inc(t->r));
}

static struct node *insert(const struct node *t, uint64_t k, uint64_t v)
{
    struct node *s = ins(t, k, v);
    if (s->color == RED) {
        struct node *b = mk(BLACK, inc(s->l), s->key, s->val, inc(s->r));
        dec(s);
        s = b;
    }
    return s;
}

static uint64_t fold(const struct node *t)
{
    uint64_t sum = 0;
    for (; t; t = t->r)
        sum += fold(t->l) + t->key * 31 + t->val;
    return sum;
}

#define KEEP 100

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "ns", "[-n INSERTS] [-s SEED]");
    long n = wl_lopt(argc, argv, "-n", 600000);
    struct wl_rng rng = { (uint64_t)wl_lopt(argc, argv, "-s", 1) };
    struct node *t = NULL, *kept[KEEP];
    int nkept = 0;
    for (long i = 0; i < n; i++) {
        struct node *next = insert(t, wl_below(&rng, 100000), (uint64_t)i);
        if (i % 100 == 0 && nkept < KEEP)
            kept[nkept++] = t;                  /* a checkpoint keeps the old version */
        else
            dec(t);
        t = next;
        if (nkept == KEEP) {
            while (nkept)
                dec(kept[--nkept]);
        }
    }
    unsigned long long check = fold(t);
    dec(t);
    while (nkept)
        dec(kept[--nkept]);
    wl_result((unsigned long long)n, check);
    return 0;
}
