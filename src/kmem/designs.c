/* designs.c — the one list of the object layer's designs.  Everything else
 * that names them reads it: SLABKIT_DESIGN (cache_init), slabkit_designs()
 * (the tools, the tests and the benchmarks ask the library: `slabkit
 * designs`).  Adding a design is its file plus one line here.
 *
 * The first is the default: SLAB, chosen from the design comparison and the
 * malloc benchmark (docs/benchmarks.md; the README says why). */
#include "cache.h"
#include "../core/options.h"

static const struct design_ops *const designs[] = {
    &slab_design,
    &slub_design,
    &slob_design,
    &slqb_design,
};
#define DESIGNS ARRAY_SIZE(designs)

SK_API const char *const *slabkit_designs(void)
{
    static const char *names[DESIGNS + 1];   /* NULL-terminated */
    for (size_t i = 0; i < DESIGNS; i++)     /* the same values each time: atomic, so callers may race */
        __atomic_store_n(&names[i], designs[i]->name, __ATOMIC_RELAXED);
    return names;
}

const struct design_ops *cache_design_chosen(void)
{
    if (!sk_opt.design)
        return designs[0];
    int i = options_pick("SLABKIT_DESIGN", sk_opt.design, slabkit_designs(), (int)DESIGNS);
    return designs[i < 0 ? 0 : i];
}
