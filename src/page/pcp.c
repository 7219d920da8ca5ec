/* pcp.c — the lazy layer's slow paths, shared by both back ends: Linux's
 * per-CPU page lists (pcp) made per-thread.  A thread's list holds single
 * free pages (kind PAGE_LAZY, singly linked through desc.free.next from
 * thread.pcp_head, pcp_count of them); the fast paths in pages.c pop and
 * push it without a lock.  An empty list is refilled with PCP_BATCH pages
 * under one back-end lock acquisition; a list above its thread's high mark
 * (pcp_over_high) gives PCP_BATCH back (to the buddy, where they coalesce; to
 * the iBuddy, where they are pushed as frames).  We return the most recently
 * freed pages (the top of the list): Linux returns the coldest, but a singly
 * linked list has no tail and the difference does not matter to a user-space
 * page (no cache coldness to preserve beyond what the next allocation
 * touches).  The list of a thread is
 * only touched by that thread, or by page_thread_exit once it is gone. */
#include "page_int.h"
#include "../os/os.h"

unsigned pcp_high = PCP_HIGH_MAX;

/* thread_list_lock held.  A thread's own mark is set again at its next
 * overflow; one above the new share comes down now (a lost race with the
 * owner's own store only leaves it there until that overflow). */
void page_threads_live(unsigned n)
{
    unsigned high = PCP_ALL_PAGES / (n ? n : 1);
    high = high < PCP_BATCH ? PCP_BATCH : high > PCP_HIGH_MAX ? PCP_HIGH_MAX : high;
    __atomic_store_n(&pcp_high, high, __ATOMIC_RELAXED);
    for (struct sk_thread *t = thread_list; t; t = t->next)
        if (__atomic_load_n(&t->pcp_high, __ATOMIC_RELAXED) > high)
            __atomic_store_n(&t->pcp_high, high, __ATOMIC_RELAXED);
}

bool pcp_refill(struct sk_thread *t)
{
    struct page_desc *chain;
    unsigned got = page_be->alloc_batch(t, PCP_BATCH, &chain);
    if (!got)
        return false;
    page_note_freed(-(int64_t)got);
    /* The list is empty here (refill only on a miss). */
    __atomic_store_n(&t->pcp_head, chain, __ATOMIC_RELEASE);   /* see free_block */
    t->pcp_count = got;
    return true;
}

void pcp_drain(struct sk_thread *t, unsigned n)
{
    struct page_desc *first = t->pcp_head, *d = first;
    unsigned k = 1;
    if (!d || n == 0)
        return;
    while (k < n && d->free.next) {
        d = d->free.next;
        k++;
    }
    t->pcp_head = d->free.next;
    t->pcp_count -= k;
    d->free.next = NULL;
    page_be->free_batch(first, k);
    page_note_freed((int64_t)k);
}

/* The list went over its high mark: PCP_BATCH go back (more if the mark
 * came down), and the mark is set again.  A list may hold the live threads'
 * share unless, over the last window of at least PCP_WINDOW_MS, its thread
 * took less than an eighth of what it freed: a funnel (a thread that frees
 * what others allocated; xmalloc-test's reader kept 341 pages on its list),
 * whose pages are worth more in the back end, where any thread can take them
 * and the purge can return them, so it keeps one batch.  A burst that frees
 * thousands of pages and takes them again keeps its share. */
void pcp_over_high(struct sk_thread *t)
{
    uint64_t now = os_now_ms();
    if (now - t->pcp_window_ms >= PCP_WINDOW_MS) {
        t->pcp_funnel = t->pcp_allocs - t->pcp_window_allocs < (t->pcp_frees - t->pcp_window_frees) / 8;
        t->pcp_window_ms = now;
        t->pcp_window_allocs = t->pcp_allocs;
        t->pcp_window_frees = t->pcp_frees;
    }
    unsigned high = t->pcp_funnel ? PCP_BATCH : __atomic_load_n(&pcp_high, __ATOMIC_RELAXED);
    __atomic_store_n(&t->pcp_high, high, __ATOMIC_RELAXED);   /* see page_threads_live */
    if (t->pcp_count > high)
        pcp_drain(t, t->pcp_count - high < PCP_BATCH ? PCP_BATCH : t->pcp_count - high);
}

/* A back end about to grow for a block of two frames or more (no back-end
 * lock held) first takes the calling thread's lazy frames back: single
 * frames parked there can complete an aligned run among the free ones, and
 * growing instead faults in memory the program never used while up to
 * pcp_high frames it did use sit idle (Linux drains the per-CPU lists before
 * it reclaims for a high-order request).  mallocbench classcycle, each size
 * class's slabs built while the frames the earlier classes' one-page slabs
 * left sat on the list: peak RSS 9.0 -> 7.2 MiB.  Only on growth, so the
 * lists' O(1) paths are untouched.  Once per request (*done says it
 * happened); true if any frame went back (the caller searches again before
 * it grows). */
bool pcp_give_back(struct sk_thread *t, bool *done)
{
    if (*done)
        return false;
    *done = true;
    if (t->state != THREAD_LIVE || !t->pcp_count)
        return false;
    pcp_drain(t, t->pcp_count);
    return true;
}

void page_thread_exit(struct sk_thread *t)
{
    if (t->pcp_head)
        pcp_drain(t, t->pcp_count);
    t->pcp_head = NULL;
    t->pcp_count = 0;
    page_fold_thread_counters(t);
}
