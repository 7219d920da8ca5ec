/* kernel.c — the file-server mix of the kernel allocator comparison, in user
 * space: many object types with their own sizes and lifetimes, as a kernel
 * serving files allocates them.  Sizes follow a Linux slabinfo:
 *   names (getname, 32..255 B)           freed at once
 *   dentry 192 B, inode 600 B            long-lived, in a capped cache (dcache/icache)
 *   file 256 B                           open .. close (a table of open files)
 *   buffer_head 104 B + page 4096 B      page cache, capped, evicted at random
 *   skbuff 232 B + data 64..1500 B       in flight on a ring of 64 (network send)
 * Files are picked with a skewed (cubic) distribution, as hot files are.
 * usage: kernel [-n OPS] [-f FILES] [-p CACHED_PAGES] [-s SEED] */
#include "wl.h"

#define PAGES_PER_FILE 8
#define OPEN_MAX 256
#define SKB_RING 64

struct inode { uint64_t ino; char pad[600 - 8 - sizeof(void *)]; void **pages; };
struct dentry { uint64_t ino; struct inode *inode; char name[192 - 16]; };
struct file { struct dentry *d; uint64_t pos; char pad[256 - 16]; };
struct bh { void *data; uint64_t block; char pad[104 - 16]; };

static struct dentry **dcache;   /* by file number */
static long nfiles, ndentries, dcache_cap, npages, pages_cap;
static unsigned long long ops;

static void free_pages(struct inode *in)
{
    if (!in->pages)
        return;
    for (int b = 0; b < PAGES_PER_FILE; b++) {
        struct bh *bh = in->pages[b];
        if (bh) {
            free(bh->data);
            free(bh);
            npages--;
            ops += 2;
        }
    }
    free(in->pages);
    in->pages = NULL;
    ops++;
}

static void evict_dentry(struct wl_rng *r, struct file **open)
{
    for (;;) {
        long f = (long)wl_below(r, (uint64_t)nfiles);
        struct dentry *d = dcache[f];
        if (!d)
            continue;
        for (int i = 0; i < OPEN_MAX; i++)     /* an open file pins its dentry */
            if (open[i] && open[i]->d == d)
                goto next;
        if (d->inode->ino != (uint64_t)f || d->ino != (uint64_t)f) {
            fprintf(stderr, "kernel: dentry %p corrupted\n", (void *)d);
            exit(3);
        }
        free_pages(d->inode);
        free(d->inode);
        free(d);
        dcache[f] = NULL;
        ndentries--;
        ops += 2;
        return;
next:;
    }
}

static void evict_pages(struct wl_rng *r)
{
    for (;;) {
        long f = (long)wl_below(r, (uint64_t)nfiles);
        if (dcache[f] && dcache[f]->inode->pages) {
            free_pages(dcache[f]->inode);
            return;
        }
    }
}

int main(int argc, char **argv)
{
    wl_check_opts(argc, argv, "nfps", "[-n OPS] [-f FILES] [-p CACHED_PAGES] [-s SEED]");
    long n = wl_lopt(argc, argv, "-n", 500000);
    nfiles = wl_lopt(argc, argv, "-f", 20000);
    pages_cap = wl_lopt(argc, argv, "-p", 4000);
    struct wl_rng rng = { (uint64_t)wl_lopt(argc, argv, "-s", 42) };
    if (n <= 0 || nfiles < 16 || pages_cap < PAGES_PER_FILE) {
        fprintf(stderr, "kernel: bad parameters\n");
        return 2;
    }
    dcache_cap = nfiles / 2;
    dcache = calloc((size_t)nfiles, sizeof *dcache);
    struct file *open[OPEN_MAX] = {0};
    void *skb[SKB_RING][2] = {{0}};
    unsigned long long check = 0;
    for (long i = 0; i < n; i++) {
        double u = wl_unit(&rng);
        long f = (long)(u * u * u * (double)nfiles);
        /* lookup: the name is copied in and dropped */
        size_t nl = 32 + wl_below(&rng, 224);
        char *name = wl_malloc(nl);
        memset(name, 'a' + (int)(f % 26), nl);
        check += (unsigned char)name[nl / 2];
        free(name);
        ops += 2;
        struct dentry *d = dcache[f];
        if (!d) {
            if (ndentries >= dcache_cap)
                evict_dentry(&rng, open);
            d = wl_malloc(sizeof *d);
            d->ino = (uint64_t)f;
            d->inode = wl_malloc(sizeof *d->inode);
            memset(d->inode, 0, sizeof *d->inode);
            d->inode->ino = (uint64_t)f;
            dcache[f] = d;
            ndentries++;
            ops += 2;
        }
        /* open: replace a random slot of the open-file table (closing it) */
        int slot = (int)wl_below(&rng, OPEN_MAX);
        if (open[slot]) {
            free(open[slot]);
            ops++;
        }
        struct file *fp = wl_malloc(sizeof *fp);
        fp->d = d;
        fp->pos = 0;
        open[slot] = fp;
        ops++;
        /* read 1..4 blocks through the page cache */
        struct inode *in = d->inode;
        int nb = 1 + (int)wl_below(&rng, 4);
        for (int k = 0; k < nb; k++) {
            int b = (int)wl_below(&rng, PAGES_PER_FILE);
            if (!in->pages) {
                in->pages = calloc(PAGES_PER_FILE, sizeof(void *));
                ops++;
            }
            if (!in->pages[b]) {
                if (npages >= pages_cap)
                    evict_pages(&rng);
                if (!in->pages) {          /* evicted our own file's pages */
                    in->pages = calloc(PAGES_PER_FILE, sizeof(void *));
                    ops++;
                }
                struct bh *bh = wl_malloc(sizeof *bh);
                bh->data = wl_malloc(4096);
                memset(bh->data, (int)b, 64);
                ((char *)bh->data)[4095] = (char)b;
                bh->block = (uint64_t)b;
                in->pages[b] = bh;
                npages++;
                ops += 2;
            }
            check += (unsigned char)((char *)((struct bh *)in->pages[b])->data)[4095];
        }
        /* send: an skb and its data go on the ring, the oldest one completes */
        int s = (int)(i % SKB_RING);
        if (skb[s][0]) {
            free(skb[s][1]);
            free(skb[s][0]);
            ops += 2;
        }
        size_t dl = wl_beta_size(&rng, 2.0, 5.0, 64, 1500);
        skb[s][0] = wl_malloc(232);
        skb[s][1] = wl_malloc(dl);
        memset(skb[s][1], 's', dl);
        ops += 2;
    }
    for (int s = 0; s < SKB_RING; s++)
        if (skb[s][0]) {
            free(skb[s][1]);
            free(skb[s][0]);
            ops += 2;
        }
    for (int i = 0; i < OPEN_MAX; i++)
        if (open[i]) {
            free(open[i]);
            ops++;
        }
    for (long f = 0; f < nfiles; f++)
        if (dcache[f]) {
            free_pages(dcache[f]->inode);
            free(dcache[f]->inode);
            free(dcache[f]);
            ops += 2;
        }
    free(dcache);
    wl_result(ops, check);
    return 0;
}
