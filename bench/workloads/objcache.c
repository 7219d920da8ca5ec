/* objcache.c — Bonwick's constructed-object case, as a malloc program sees it:
 * objects that need construction (a mutex, a condition variable, a list head,
 * an owned buffer) are created, used briefly and destroyed, over and over,
 * with a working set of LIVE objects.  Under malloc every allocation pays the
 * constructor and every free the destructor; an object cache keeps that cost
 * out of the loop, which is what the comparison shows.
 * usage: objcache [-n OPS] [-l LIVE] [-s SEED] */
#include "wl.h"
#include <pthread.h>

struct obj {                     /* ~ a Solaris vnode-ish object: 200-odd bytes */
    pthread_mutex_t lock;
    pthread_cond_t cv;
    struct obj *next, *prev;
    uint64_t tag;
    int refcnt;
    char name[64];
    char *buf;                   /* owned buffer, constructed with the object */
    size_t buflen;
};

static struct obj *obj_create(struct wl_rng *r, uint64_t tag)
{
    struct obj *o = wl_malloc(sizeof *o);
    pthread_mutex_init(&o->lock, NULL);
    pthread_cond_init(&o->cv, NULL);
    o->next = o->prev = o;
    o->tag = tag;
    o->refcnt = 1;
    snprintf(o->name, sizeof o->name, "obj-%llx", (unsigned long long)tag);
    o->buflen = 64 + wl_below(r, 448);
    o->buf = wl_malloc(o->buflen);
    memset(o->buf, (int)(tag & 0xff), o->buflen);
    return o;
}

static void obj_destroy(struct obj *o)
{
    if (o->refcnt != 1 || (unsigned char)o->buf[o->buflen - 1] != (unsigned char)o->tag) {
        fprintf(stderr, "objcache: object %p corrupted\n", (void *)o);
        exit(3);
    }
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->lock);
    free(o->buf);
    free(o);
}

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "nls", "[-n OPS] [-l LIVE] [-s SEED]");
    long n = wl_lopt(argc, argv, "-n", 1000000), live = wl_lopt(argc, argv, "-l", 5000);
    struct wl_rng rng = { (uint64_t)wl_lopt(argc, argv, "-s", 42) };
    if (n <= 0 || live <= 0) {
        fprintf(stderr, "objcache: bad parameters\n");
        return 2;
    }
    struct obj **set = calloc((size_t)live, sizeof *set);
    unsigned long long ops = 0, check = 0;
    for (long i = 0; i < n; i++) {
        long k = (long)wl_below(&rng, (uint64_t)live);
        if (set[k]) {                       /* use it, then destroy it */
            pthread_mutex_lock(&set[k]->lock);
            check += (unsigned char)set[k]->name[4];
            pthread_mutex_unlock(&set[k]->lock);
            obj_destroy(set[k]);
            ops += 2;
        }
        set[k] = obj_create(&rng, wl_next(&rng));
        ops += 2;
    }
    for (long k = 0; k < live; k++)
        if (set[k]) {
            obj_destroy(set[k]);
            ops += 2;
        }
    free(set);
    wl_result(ops, check);
    return 0;
}
