/* unwind.c — a fast x86-64 unwinder for the profiler: the call-frame
 * information every object carries (.eh_frame, found through
 * .eh_frame_hdr's sorted table) gives, for each return address, where the
 * caller's frame starts (the CFA: rsp or rbp plus an offset) and where the
 * return address and rbp were saved.  That rule is worked out once per
 * return address and kept in a table, so a stack seen before costs a lookup
 * and two loads per frame; libgcc's _Unwind_Backtrace works the rule out
 * again at every frame of every sample (some 1,800 instructions a frame,
 * 85% of the profiler's cost on the lab's allocation-heavy workloads).
 *
 * Only what compilers emit for ordinary x86-64 code is understood: a CFA
 * on rsp or rbp, the return address and rbp saved at offsets from it.  Any
 * other rule (a realigned stack's expressions, signal frames, code with no
 * unwind information) makes unwind_fast fail, and the caller takes libgcc's
 * walk instead (stack.c), so the result never depends on what is not
 * understood here.  SLABKIT_PROF=...,unwind=check runs both on every sample
 * and reports any difference (tests/python/test_prof.py).
 *
 * The table is direct-mapped by address, entries guarded by a sequence
 * count (odd while written, under rules_lock; readers retry nothing: a torn
 * or missing entry is recomputed).  Rules are computed outside the lock: they
 * only read the objects' mapped unwind data (and dl_iterate_phdr, which
 * takes the loader's own lock, as libgcc does). */
#include <link.h>
#include <string.h>
#include "prof_int.h"
#include "../core/self.h"

enum { RULE_STEP = 1, RULE_END, RULE_NONE };
enum { REG_RBP = 6, REG_RSP = 7, REG_RA = 16 };

struct rule {
    int32_t cfa_off;
    int16_t ra_off, rbp_off;
    uint8_t kind, cfa_rbp, rbp_saved;
};

struct rule_slot {
    uint32_t seq;
    uintptr_t key;
    struct rule rule;
};

#define RULE_SLOTS 8192
static struct rule_slot rules[RULE_SLOTS] SK_RARELY_USED;
static struct sk_lock rules_lock = SK_LOCK_INIT;

static size_t slot_of(uintptr_t key) { return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 51) & (RULE_SLOTS - 1); }

/* --- Reading DWARF ------------------------------------------------------- */

struct reader { const uint8_t *p, *end; bool bad; };

static uint64_t uleb(struct reader *r)
{
    uint64_t v = 0;
    for (unsigned shift = 0; r->p < r->end && shift < 64; shift += 7) {
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    r->bad = true;
    return 0;
}

static int64_t sleb(struct reader *r)
{
    uint64_t v = 0;
    for (unsigned shift = 0; r->p < r->end && shift < 64; shift += 7) {
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            if (shift + 7 < 64 && (b & 0x40))
                v |= ~(uint64_t)0 << (shift + 7);        /* sign-extend */
            return (int64_t)v;
        }
    }
    r->bad = true;
    return 0;
}

/* Skips a block of uleb-counted bytes (a DWARF expression, augmentation data). */
static void skip_block(struct reader *r)
{
    uint64_t n = uleb(r);
    if (n > (uint64_t)(r->end - r->p))
        r->bad = true;
    else
        r->p += n;
}

static uint64_t fixed(struct reader *r, unsigned n)
{
    if (r->end - r->p < (ptrdiff_t)n) {
        r->bad = true;
        return 0;
    }
    uint64_t v = 0;
    memcpy(&v, r->p, n);
    r->p += n;
    return v;
}

/* A pointer in DW_EH_PE encoding enc; datarel is relative to base. */
static uintptr_t encoded(struct reader *r, uint8_t enc, uintptr_t base)
{
    if (enc == 0xff)                   /* DW_EH_PE_omit */
        return 0;
    uintptr_t at = (uintptr_t)r->p;
    int64_t v;
    switch (enc & 0x0f) {
    case 0x00: v = (int64_t)fixed(r, 8); break;            /* absptr */
    case 0x01: v = (int64_t)uleb(r); break;
    case 0x02: v = (int64_t)fixed(r, 2); break;
    case 0x03: v = (int64_t)fixed(r, 4); break;
    case 0x04: v = (int64_t)fixed(r, 8); break;
    case 0x09: v = sleb(r); break;
    case 0x0a: v = (int16_t)fixed(r, 2); break;
    case 0x0b: v = (int32_t)fixed(r, 4); break;
    case 0x0c: v = (int64_t)fixed(r, 8); break;
    default: r->bad = true; return 0;
    }
    switch (enc & 0x70) {
    case 0x00: break;
    case 0x10: v += (int64_t)at; break;                     /* pcrel */
    case 0x30: v += (int64_t)base; break;                   /* datarel */
    default: r->bad = true; return 0;
    }
    return (uintptr_t)v;                                    /* (indirect: only personality pointers, never followed) */
}

/* --- Finding the FDE ----------------------------------------------------- */

struct find { uintptr_t pc; const uint8_t *hdr; };

static int find_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct find *f = arg;
    const ElfW(Phdr) *eh = NULL;
    bool inside = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && f->pc >= start && f->pc < start + ph->p_memsz)
            inside = true;
        else if (ph->p_type == PT_GNU_EH_FRAME)
            eh = ph;
    }
    if (!inside)
        return 0;
    f->hdr = eh ? (const uint8_t *)(info->dlpi_addr + eh->p_vaddr) : NULL;
    return 1;
}

/* The FDE covering pc, from .eh_frame_hdr's binary-search table. */
static const uint8_t *find_fde(uintptr_t pc)
{
    struct find f = { pc, NULL };
    if (!dl_iterate_phdr(find_object, &f) || !f.hdr || f.hdr[0] != 1)
        return NULL;
    uintptr_t base = (uintptr_t)f.hdr;
    struct reader r = { f.hdr + 4, f.hdr + 4 + 16, false };
    encoded(&r, f.hdr[1], base);                            /* eh_frame_ptr */
    uint64_t count = encoded(&r, f.hdr[2], base);
    if (r.bad || f.hdr[3] != 0x3b || !count)                /* table: datarel sdata4 pairs */
        return NULL;
    const int32_t *table = (const int32_t *)r.p;
    size_t lo = 0, hi = count;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (base + (intptr_t)table[2 * mid] <= pc)
            lo = mid;
        else
            hi = mid;
    }
    if (base + (intptr_t)table[2 * lo] > pc)
        return NULL;
    return (const uint8_t *)(base + (intptr_t)table[2 * lo + 1]);
}

/* --- The CFA program --------------------------------------------------------- */

enum { HOW_SAME, HOW_OFFSET, HOW_UNDEF, HOW_OTHER };

struct row {
    int cfa_reg;                       /* -1: an expression */
    int64_t cfa_off;
    uint8_t rbp_how, ra_how;
    int64_t rbp_off, ra_off;
};

struct cie {
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_reg;
    uint8_t fde_enc;
    bool augmented;
    const uint8_t *insns, *end;
};

static bool parse_cie(const uint8_t *p, struct cie *c)
{
    uint32_t len;
    memcpy(&len, p, 4);
    if (len == 0 || len == 0xffffffffu)
        return false;
    struct reader r = { p + 4, p + 4 + len, false };
    if (fixed(&r, 4) != 0)
        return false;
    uint8_t version = (uint8_t)fixed(&r, 1);
    const char *aug = (const char *)r.p;
    size_t aug_len = strnlen(aug, (size_t)(r.end - r.p));
    r.p += aug_len + 1;
    if (strstr(aug, "eh"))
        return false;
    c->code_align = uleb(&r);
    c->data_align = sleb(&r);
    c->ra_reg = version == 1 ? fixed(&r, 1) : uleb(&r);
    c->fde_enc = 0;
    c->augmented = aug[0] == 'z';
    if (c->augmented) {
        uint64_t n = uleb(&r);
        const uint8_t *after = r.p + n;
        for (const char *a = aug + 1; *a; a++) {
            if (*a == 'R') {
                c->fde_enc = (uint8_t)fixed(&r, 1);
            } else if (*a == 'L') {
                fixed(&r, 1);
            } else if (*a == 'P') {
                uint8_t enc = (uint8_t)fixed(&r, 1);
                encoded(&r, enc & 0x7f, 0);
            } else {
                return false;                               /* 'S' (signal frame) and the rest */
            }
        }
        r.p = after;
    }
    c->insns = r.p;
    c->end = r.end;
    return !r.bad && c->ra_reg == REG_RA;
}

static void set_reg(struct row *row, uint64_t reg, uint8_t how, int64_t off)
{
    if (reg == REG_RBP)
        row->rbp_how = how, row->rbp_off = off;
    else if (reg == REG_RA)
        row->ra_how = how, row->ra_off = off;
}

/* Runs a CFA program until the row for key; false on what is not understood. */
static bool run_program(struct reader *r, const struct cie *c, uintptr_t loc, uintptr_t key,
                        struct row *row, const struct row *initial)
{
    struct row saved[8];
    unsigned nsaved = 0;
    while (r->p < r->end && !r->bad) {
        uint8_t op = (uint8_t)fixed(r, 1);
        uint64_t reg;
        switch (op >> 6) {
        case 1:
            loc += (op & 0x3f) * c->code_align;
            if (loc > key)
                return true;
            continue;
        case 2:
            set_reg(row, op & 0x3f, HOW_OFFSET, (int64_t)uleb(r) * c->data_align);
            continue;
        case 3:
            reg = op & 0x3f;
            if (reg == REG_RBP) row->rbp_how = initial->rbp_how, row->rbp_off = initial->rbp_off;
            if (reg == REG_RA) row->ra_how = initial->ra_how, row->ra_off = initial->ra_off;
            continue;
        }
        switch (op) {
        case 0x00: break;                                   /* nop */
        case 0x01: loc = encoded(r, c->fde_enc, 0); if (loc > key) return true; break;
        case 0x02: loc += fixed(r, 1) * c->code_align; if (loc > key) return true; break;
        case 0x03: loc += fixed(r, 2) * c->code_align; if (loc > key) return true; break;
        case 0x04: loc += fixed(r, 4) * c->code_align; if (loc > key) return true; break;
        case 0x05: reg = uleb(r); set_reg(row, reg, HOW_OFFSET, (int64_t)uleb(r) * c->data_align); break;
        case 0x06:
            reg = uleb(r);
            if (reg == REG_RBP) row->rbp_how = initial->rbp_how, row->rbp_off = initial->rbp_off;
            if (reg == REG_RA) row->ra_how = initial->ra_how, row->ra_off = initial->ra_off;
            break;
        case 0x07: set_reg(row, uleb(r), HOW_UNDEF, 0); break;
        case 0x08: set_reg(row, uleb(r), HOW_SAME, 0); break;
        case 0x09: reg = uleb(r); uleb(r); set_reg(row, reg, HOW_OTHER, 0); break;
        case 0x0a: if (nsaved == 8) return false; saved[nsaved++] = *row; break;
        case 0x0b: if (!nsaved) return false; *row = saved[--nsaved]; break;
        case 0x0c: row->cfa_reg = (int)uleb(r); row->cfa_off = (int64_t)uleb(r); break;
        case 0x0d: row->cfa_reg = (int)uleb(r); break;
        case 0x0e: row->cfa_off = (int64_t)uleb(r); break;
        case 0x0f: skip_block(r); row->cfa_reg = -1; break;             /* def_cfa_expression */
        case 0x10: reg = uleb(r); skip_block(r); set_reg(row, reg, HOW_OTHER, 0); break;
        case 0x11: reg = uleb(r); set_reg(row, reg, HOW_OFFSET, sleb(r) * c->data_align); break;
        case 0x12: row->cfa_reg = (int)uleb(r); row->cfa_off = sleb(r) * c->data_align; break;
        case 0x13: row->cfa_off = sleb(r) * c->data_align; break;
        case 0x14: reg = uleb(r); uleb(r); set_reg(row, reg, HOW_OTHER, 0); break;
        case 0x15: reg = uleb(r); sleb(r); set_reg(row, reg, HOW_OTHER, 0); break;
        case 0x16: reg = uleb(r); skip_block(r); set_reg(row, reg, HOW_OTHER, 0); break;
        case 0x2e: uleb(r); break;                                       /* GNU_args_size */
        case 0x2f: reg = uleb(r); set_reg(row, reg, HOW_OFFSET, -(int64_t)uleb(r) * c->data_align); break;
        default: return false;
        }
    }
    return !r->bad;
}

/* The rule of the row covering key (a return address minus one, or an
 * exact pc for the first frame). */
static struct rule compute_rule(uintptr_t key)
{
    struct rule none = { .kind = RULE_NONE };
    const uint8_t *fde = find_fde(key);
    if (!fde)
        return none;
    uint32_t len, cie_off;
    memcpy(&len, fde, 4);
    memcpy(&cie_off, fde + 4, 4);
    if (len == 0 || len == 0xffffffffu || cie_off == 0)
        return none;
    struct cie c;
    if (!parse_cie(fde + 4 - cie_off, &c))
        return none;
    struct reader r = { fde + 8, fde + 4 + len, false };
    uintptr_t begin = encoded(&r, c.fde_enc, 0);
    uintptr_t range = encoded(&r, c.fde_enc & 0x0f, 0);
    if (c.augmented)
        skip_block(&r);
    if (r.bad || key < begin || key >= begin + range)
        return none;
    struct row row = { REG_RSP, 8, HOW_SAME, HOW_OFFSET, 0, -8 }, initial;
    struct reader ci = { c.insns, c.end, false };
    if (!run_program(&ci, &c, begin, UINTPTR_MAX, &row, &row))
        return none;
    initial = row;
    if (!run_program(&r, &c, begin, key, &row, &initial))
        return none;
    if (row.ra_how == HOW_UNDEF)
        return (struct rule){ .kind = RULE_END };
    if ((row.cfa_reg != REG_RSP && row.cfa_reg != REG_RBP) || row.ra_how != HOW_OFFSET ||
        (row.rbp_how != HOW_SAME && row.rbp_how != HOW_OFFSET) || row.cfa_off < 0 || row.cfa_off > INT32_MAX ||
        row.ra_off < INT16_MIN || row.ra_off > INT16_MAX || row.rbp_off < INT16_MIN || row.rbp_off > INT16_MAX)
        return none;
    return (struct rule){ .cfa_off = (int32_t)row.cfa_off, .ra_off = (int16_t)row.ra_off,
                          .rbp_off = (int16_t)row.rbp_off, .kind = RULE_STEP, .cfa_rbp = row.cfa_reg == REG_RBP,
                          .rbp_saved = row.rbp_how == HOW_OFFSET };
}

static struct rule rule_for(uintptr_t key)
{
    struct rule_slot *s = &rules[slot_of(key)];
    uint32_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
    if (!(seq & 1) && __atomic_load_n(&s->key, __ATOMIC_RELAXED) == key) {
        struct rule r = s->rule;
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) == seq)
            return r;
    }
    struct rule r = compute_rule(key);
    lock_acquire(&rules_lock);
    __atomic_store_n(&s->seq, s->seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    s->key = key;
    s->rule = r;
    __atomic_store_n(&s->seq, s->seq + 1, __ATOMIC_RELEASE);
    lock_release(&rules_lock);
    return r;
}

/* Walks from the frame at (pc, sp, bp) -- pc exact, not a return address --
 * recording return addresses from the first one outside slabkit.  False
 * when a frame's rule is not understood here (the caller uses libgcc). */
bool unwind_fast(uintptr_t pc, uintptr_t sp, uintptr_t bp, struct prof_stack *st)
{
    st->depth = 0;
    uintptr_t key = pc;
    bool started = false;
    for (unsigned frames = 0; frames < 512; frames++) {
        struct rule r = rule_for(key);
        if (r.kind == RULE_END)
            return true;
        if (r.kind != RULE_STEP)
            return false;
        uintptr_t cfa = (r.cfa_rbp ? bp : sp) + (uintptr_t)(intptr_t)r.cfa_off;
        if (cfa <= sp || cfa - sp > ((uintptr_t)1 << 26))   /* the caller's frame lies above, not far */
            return false;
        uintptr_t ra = *(const uintptr_t *)(cfa + r.ra_off);
        if (r.rbp_saved)
            bp = *(const uintptr_t *)(cfa + r.rbp_off);
        sp = cfa;
        if (!ra)
            return true;
        if (!started && self_code((const void *)ra)) {
            key = ra - 1;
            continue;
        }
        started = true;
        st->pc[st->depth++] = ra;
        if (st->depth == PROF_DEPTH)
            return true;
        key = ra - 1;
    }
    return false;
}
