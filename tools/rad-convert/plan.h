/* plan.h — a conversion plan: for every weight the plugin declared, which checkpoint tensors
 * feed it (through the plugin's name map), the transform, the target encoding and the bytes. */
#ifndef RAD_CONVERT_PLAN_H
#define RAD_CONVERT_PLAN_H

#include "libcommon/plugin/rad_graph.h"
#include "libcommon/format/rad_model.h"

typedef enum QuantChoice { Q_KEEP = 0, Q_F32, Q_BF16, Q_F16, Q_Q8_0 } QuantChoice;

typedef struct PlanItem {
    char *dst;                    /* declared name (owned) */
    RadNameMap map;               /* the entry that won (strings owned by the graph) */
    int has_map;                  /* 0: no entry, the checkpoint's tensor of the same name */
    const RadTensor **src;        /* [n_src] its present sources, in map order ([0] for COPY); owned */
    int n_src;
    RadEnc src_enc;               /* encoding of the data the transform yields */
    RadEnc enc;                   /* target encoding */
    uint32_t rank;
    uint64_t shape[RAD_MAX_RANK]; /* of the output */
    uint64_t bytes;               /* of the output (every plane) */
    uint32_t n_planes;            /* 1, or a block-scaled f8_e4m3 source's 2, copied plane by plane */
} PlanItem;

typedef struct Plan {
    const RadModelFile *src;      /* the checkpoint */
    QuantChoice quant;
    PlanItem *items;              /* [n] in declaration order */
    int n, cap;
    char missing[512];            /* the first declared weight no map entry could feed */
    int drop_unclaimed;           /* --drop-unclaimed: tensors no item reads are left out */
    int no_tokenizer;             /* --no-tokenizer: a source without a tokenizer converts */
} Plan;

/* The builder's lookup at convert time: resolves a declared weight through the name map
 * against the checkpoint, records the plan item, and answers the target encoding and shape. */
RadEnc plan_lookup(void *user, const char *name, const RadWeightDecl *d, const RadGMap *maps, int n_maps,
                   uint32_t *rank, uint64_t *shape);

/* Makes the bytes of one item into *out (malloc'd, or pointing into the source when no
 * transform or re-encoding is needed: *owned says which). */
int plan_produce(const Plan *p, const PlanItem *it, const uint8_t **out, int *owned, RadErr *e);

/* After the graph is declared, what the plan leaves out of the source: a checkpoint tensor no
 * item reads is refused, naming the first few (a block_count of 1 beside 30 layers of tensors
 * would otherwise convert into a one-layer model), unless drop_unclaimed; a source without a
 * tokenizer is refused unless no_tokenizer. RAD_E_FORMAT, one line naming the source. */
int plan_check(const Plan *p, RadErr *e);

void plan_free(Plan *p);

#endif
