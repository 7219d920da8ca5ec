/* barnes.c — barnes-like: Barnes and Hut's hierarchical n-body method
 * (Nature 324, 1986; the SPLASH-2 "barnes" of mimalloc-bench).  Every time
 * step builds an octree over the bodies, one heap cell per internal node,
 * computes each cell's mass and centre of mass, lets the threads compute the
 * forces on their share of the bodies (opening criterion theta = 0.5), moves
 * the bodies and frees the whole tree: few, mid-sized (128 B), step-lived
 * allocations in a compute-bound program, as the original.  The tree is
 * built by the main thread, the force phase runs in T threads.
 * usage: barnes [-n BODIES] [-i STEPS] [-t THREADS] [-s SEED] */
#include "../workloads/wl.h"

struct body { double pos[3], vel[3], acc[3], mass; };
struct cell {                       /* a leaf holds one body (or none), an inner cell children */
    double mass, cm[3], centre[3], half;
    int inner;
    struct body *body;
    struct cell *child[8];
};

static struct cell *cell_new(const double centre[3], double half)
{
    struct cell *c = wl_malloc(sizeof *c);
    memset(c, 0, sizeof *c);
    memcpy(c->centre, centre, sizeof c->centre);
    c->half = half;
    return c;
}

static int octant(const struct cell *c, const double pos[3])
{
    return (pos[0] > c->centre[0]) | (pos[1] > c->centre[1]) << 1 | (pos[2] > c->centre[2]) << 2;
}

static struct cell *child_for(struct cell *c, int o)
{
    if (!c->child[o]) {
        double h = c->half / 2, ctr[3];
        for (int k = 0; k < 3; k++)
            ctr[k] = c->centre[k] + ((o >> k & 1) ? h : -h);
        c->child[o] = cell_new(ctr, h);
    }
    return c->child[o];
}

static void insert(struct cell *c, struct body *b)
{
    for (int depth = 0;; depth++) {
        if (c->inner) {
            c = child_for(c, octant(c, b->pos));
        } else if (!c->body) {
            c->body = b;
            return;
        } else if (depth > 48) {
            return;                         /* coincident bodies: keep the first */
        } else {                            /* a leaf becomes inner, its body moves down */
            struct body *old = c->body;
            c->body = NULL;
            c->inner = 1;
            child_for(c, octant(c, old->pos))->body = old;
        }
    }
}

static void summarise(struct cell *c)
{
    if (!c->inner) {
        c->mass = c->body ? c->body->mass : 0;
        if (!c->body)
            return;
        memcpy(c->cm, c->body->pos, sizeof c->cm);
        return;
    }
    double m = 0, cm[3] = { 0, 0, 0 };
    for (int o = 0; o < 8; o++)
        if (c->child[o]) {
            summarise(c->child[o]);
            m += c->child[o]->mass;
            for (int k = 0; k < 3; k++)
                cm[k] += c->child[o]->mass * c->child[o]->cm[k];
        }
    c->mass = m;
    for (int k = 0; k < 3; k++)
        c->cm[k] = m > 0 ? cm[k] / m : c->centre[k];
}

static void force(const struct cell *c, struct body *b)
{
    if (!c || c->mass == 0 || c->body == b)
        return;
    double d[3], r2 = 1e-4;                 /* softening */
    for (int k = 0; k < 3; k++) {
        d[k] = c->cm[k] - b->pos[k];
        r2 += d[k] * d[k];
    }
    if (!c->inner || 4 * c->half * c->half < 0.25 * r2) {    /* (size / r) < theta */
        double f = c->mass / (r2 * sqrt(r2));
        for (int k = 0; k < 3; k++)
            b->acc[k] += f * d[k];
        return;
    }
    for (int o = 0; o < 8; o++)
        force(c->child[o], b);
}

static void tree_free(struct cell *c)
{
    if (!c)
        return;
    for (int o = 0; o < 8; o++)
        tree_free(c->child[o]);
    free(c);
}

struct share { struct body *b; long from, to; const struct cell *root; };

static void *forces(void *arg)
{
    struct share *s = arg;
    for (long i = s->from; i < s->to; i++) {
        memset(s->b[i].acc, 0, sizeof s->b[i].acc);
        force(s->root, &s->b[i]);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "nits", "[-n BODIES] [-i STEPS] [-t THREADS] [-s SEED]");
    long n = wl_lopt(argc, argv, "-n", 16384), steps = wl_lopt(argc, argv, "-i", 8);
    int threads = (int)wl_lopt(argc, argv, "-t", 2);
    struct wl_rng rng = { (uint64_t)wl_lopt(argc, argv, "-s", 1) };
    if (n < 2 || steps < 1 || threads < 1 || threads > 256) {
        fprintf(stderr, "barnes: bad -n, -i or -t\n");
        return 2;
    }
    struct body *b = wl_malloc((size_t)n * sizeof *b);
    for (long i = 0; i < n; i++) {          /* a Plummer-like ball */
        double r = pow(wl_unit(&rng), 1.0 / 3), z = 2 * wl_unit(&rng) - 1, t = 6.283185307 * wl_unit(&rng);
        double s = sqrt(1 - z * z);
        b[i] = (struct body){ { r * s * cos(t), r * s * sin(t), r * z }, { 0, 0, 0 }, { 0, 0, 0 }, 1.0 / (double)n };
    }
    struct share sh[256];
    unsigned long long steps_done = 0;
    for (long step = 0; step < steps; step++) {
        double centre[3] = { 0, 0, 0 }, half = 0;
        for (long i = 0; i < n; i++)
            for (int k = 0; k < 3; k++)
                half = fabs(b[i].pos[k]) > half ? fabs(b[i].pos[k]) : half;
        struct cell *root = cell_new(centre, half * 1.001);
        for (long i = 0; i < n; i++)
            insert(root, &b[i]);
        summarise(root);
        for (int t = 0; t < threads; t++)
            sh[t] = (struct share){ b, n * t / threads, n * (t + 1) / threads, root };
        wl_parallel(threads, forces, sh, sizeof sh[0]);
        for (long i = 0; i < n; i++)
            for (int k = 0; k < 3; k++) {
                b[i].vel[k] += 0.001 * b[i].acc[k];
                b[i].pos[k] += 0.001 * b[i].vel[k];
            }
        steps_done++;
        tree_free(root);
    }
    unsigned long long check = 0;
    for (long i = 0; i < n; i++)
        check = check * 31 + (unsigned long long)(int64_t)(b[i].pos[0] * 1e9);
    free(b);
    wl_result((unsigned long long)(n * steps), check ^ steps_done);
    return 0;
}
