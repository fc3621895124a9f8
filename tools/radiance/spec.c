/* spec.c — speculative decoding's set-up, for one-shot generation and the server alike. */
#include "radiance.h"

int spec_setup(const Opts *o, const RadEngineOpts *eo, RadEngine *en, const RadTok *tok, RadEngine **draft, RadSchedOpts *so,
               RadErr *e) {
    *draft = NULL;
    if (!o->spec) return RAD_OK;
    so->spec = o->spec;
    so->spec_depth = rad_engine_limits(en).max_spec; /* --spec-depth, else the plugin's probe, else the default */
    if (o->spec != RAD_SPEC_DRAFT) return RAD_OK;
    int rc = rad_spec_open_draft(eo, en, tok, o->draft, draft, e);
    so->draft = *draft;
    return rc;
}
