/* pcp.c — the lazy layer's slow paths, shared by both back ends: Linux's
 * per-CPU page lists (pcp) made per-thread.  A thread's list holds single
 * free pages (kind PAGE_LAZY, singly linked through desc.free.next from
 * thread.pcp_head, pcp_count of them); the fast paths in pages.c pop and
 * push it without a lock.  An empty list is refilled with PCP_BATCH pages
 * under one back-end lock acquisition; a list above pcp_high gives PCP_BATCH
 * back (to the buddy, where they coalesce; to the iBuddy, where they are
 * pushed as frames).  We return the most recently freed pages (the top of the
 * list): Linux returns the coldest, but a singly linked list has no tail and
 * the difference does not matter to a user-space page (no cache coldness to
 * preserve beyond what the next allocation touches).  The list of a thread is
 * only touched by that thread, or by page_thread_exit once it is gone. */
#include "page_int.h"

unsigned pcp_high = PCP_HIGH_MAX;

void page_threads_live(unsigned n)
{
    unsigned high = PCP_ALL_PAGES / (n ? n : 1);
    high = high < PCP_BATCH ? PCP_BATCH : high > PCP_HIGH_MAX ? PCP_HIGH_MAX : high;
    __atomic_store_n(&pcp_high, high, __ATOMIC_RELAXED);
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

void page_thread_exit(struct sk_thread *t)
{
    if (t->pcp_head)
        pcp_drain(t, t->pcp_count);
    t->pcp_head = NULL;
    t->pcp_count = 0;
    page_fold_thread_counters(t);
}
