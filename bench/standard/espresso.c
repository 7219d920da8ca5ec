/* espresso.c — espresso-like: two-level logic minimisation in the manner of
 * the Berkeley espresso PLA optimiser (one of Grunwald, Zorn and Henderson's
 * allocation-intensive programs, and mimalloc-bench's).  A cover is a set of
 * cubes, each cube a bit vector of two bits per input variable (01 = 0,
 * 10 = 1, 11 = don't care) allocated on its own; covers are arrays grown with
 * realloc.  Each pass builds the next cover from the consensus of
 * neighbouring cubes (a new cube per pair at distance one or zero), keeps
 * the cubes no nearby cube contains and frees the rest: many small blocks of a few
 * sizes (the cube size changes with each problem), most of them short-lived,
 * and a few growing arrays.  One thread.
 * usage: espresso [-n PROBLEMS] [-s SEED] */
#include "../workloads/wl.h"

struct cube { uint32_t words; uint32_t id; uint64_t bit[]; };
struct cover { size_t n, cap; struct cube **c; };

static struct cube *cube_new(uint32_t words)
{
    struct cube *c = wl_malloc(sizeof *c + words * sizeof(uint64_t));
    c->words = words;
    return c;
}

static void cover_add(struct cover *f, struct cube *c)
{
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 8;
        f->c = realloc(f->c, f->cap * sizeof *f->c);
        if (!f->c) {
            fprintf(stderr, "espresso: realloc failed\n");
            exit(4);
        }
    }
    f->c[f->n++] = c;
}

static void cover_free(struct cover *f)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->c[i]);
    free(f->c);
    f->n = f->cap = 0;
    f->c = NULL;
}

#define ODD 0x5555555555555555ull         /* the low bit of each variable's pair */

/* Variables where a and b have no value in common (their pair ANDs to 00). */
static int distance(const struct cube *a, const struct cube *b)
{
    int d = 0;
    for (uint32_t w = 0; w < a->words; w++) {
        uint64_t x = a->bit[w] & b->bit[w];
        d += __builtin_popcountll(~(x | x >> 1) & ODD);
    }
    return d;
}

/* The consensus of two cubes at distance at most one: their intersection
 * with the conflicting variable, if any, raised to don't-care. */
static struct cube *consensus(const struct cube *a, const struct cube *b)
{
    struct cube *c = cube_new(a->words);
    for (uint32_t w = 0; w < a->words; w++) {
        uint64_t x = a->bit[w] & b->bit[w], empty = ~(x | x >> 1) & ODD;
        c->bit[w] = x | empty | empty << 1;
    }
    return c;
}

static int contains(const struct cube *big, const struct cube *small)
{
    for (uint32_t w = 0; w < big->words; w++)
        if (small->bit[w] & ~big->bit[w])
            return 0;
    return 1;
}

/* Whether one of the last 32 cubes of f contains c (espresso keeps covers
 * sorted, so a containing cube is usually near). */
static int contained_in(const struct cover *f, const struct cube *c)
{
    for (size_t i = f->n > 32 ? f->n - 32 : 0; i < f->n; i++)
        if (contains(f->c[i], c))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "ns", "[-n PROBLEMS] [-s SEED]");
    long problems = wl_lopt(argc, argv, "-n", 400);
    struct wl_rng rng = { (uint64_t)wl_lopt(argc, argv, "-s", 1) };
    unsigned long long ops = 0, check = 0;
    for (long p = 0; p < problems; p++) {
        uint32_t vars = 16 + (uint32_t)wl_below(&rng, 112), words = (vars + 31) / 32;
        size_t ncubes = 150 + wl_below(&rng, 150);
        struct cover f = { 0, 0, NULL };
        for (size_t i = 0; i < ncubes; i++) {
            struct cube *c = cube_new(words);
            c->id = (uint32_t)i;
            for (uint32_t w = 0; w < words; w++) {
                uint64_t v = 0;
                for (int k = 0; k < 32; k++) {
                    uint32_t var = w * 32 + (uint32_t)k;
                    uint64_t r = wl_below(&rng, 8);
                    uint64_t pair = var >= vars ? 3 : r < 5 ? 3 : r < 7 ? 1 : 2;   /* mostly don't-care */
                    v |= pair << (2 * k);
                }
                c->bit[w] = v;
            }
            cover_add(&f, c);
        }
        for (int pass = 0; pass < 6; pass++) {
            struct cover g = { 0, 0, NULL };
            for (size_t i = 0; i < f.n; i++)
                for (size_t j = i + 1; j < f.n && j < i + 24; j++) {
                    ops++;
                    if (distance(f.c[i], f.c[j]) > 1)
                        continue;
                    struct cube *c = consensus(f.c[i], f.c[j]);
                    if (contained_in(&g, c))
                        free(c);
                    else
                        cover_add(&g, c);
                }
            for (size_t i = 0; i < f.n; i++) {     /* the old cubes no new one covers */
                if (contained_in(&g, f.c[i]))
                    free(f.c[i]);
                else
                    cover_add(&g, f.c[i]);
            }
            f.n = 0;
            cover_free(&f);
            f = g;
            while (f.n > 3000)                     /* keep the problem's size bounded */
                free(f.c[--f.n]);
        }
        for (size_t i = 0; i < f.n; i++)
            check = check * 1099511628211ull ^ f.c[i]->bit[0];
        check += f.n;
        cover_free(&f);
    }
    wl_result(ops, check);
    return 0;
}
