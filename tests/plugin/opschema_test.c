/* Op schemas: the vocabulary's are fixed; a new op's schema is the first declarer's. */
#include <criterion/criterion.h>
#include <string.h>

#include "libcommon/plugin/rad_opschema.h"

Test(opschema, the_vocabulary_fixes_names_kinds_and_order) {
    char msg[300] = "";
    RadParam ok[] = {RAD_RANGE("M", 1, 64), RAD_INT("N", 576), RAD_INT("K", 576)};
    cr_assert_eq(rad_opschema_check("gemm_nt", ok, 3, 1, "p", msg, sizeof msg), RAD_OK, "%s", msg);
    RadParam swapped[] = {RAD_RANGE("M", 1, 64), RAD_INT("K", 576), RAD_INT("N", 576)};
    cr_assert_eq(rad_opschema_check("gemm_nt", swapped, 3, 1, "p", msg, sizeof msg), RAD_E_ARG);
    cr_assert(strstr(msg, "parameter 1 is RAD_INT 'K'") && strstr(msg, "docs/OPS.md") && strstr(msg, "'N'"), "%s", msg);
    RadParam as_float[] = {RAD_RANGE("M", 1, 64), RAD_INT("N", 576), RAD_FLOAT("eps", 1e-5)};
    cr_assert_eq(rad_opschema_check("rmsnorm", as_float, 3, 1, "p", msg, sizeof msg), RAD_OK, "%s", msg);
    as_float[2] = RAD_INT("eps", 0);
    cr_assert_eq(rad_opschema_check("rmsnorm", as_float, 3, 1, "p", msg, sizeof msg), RAD_E_ARG);
    cr_assert(strstr(msg, "RAD_FLOAT 'eps'") != NULL, "%s", msg);
    cr_assert_eq(rad_opschema_check("gemm_nt", ok, 2, 1, "p", msg, sizeof msg), RAD_E_ARG);
    cr_assert(strstr(msg, "'K' is missing") != NULL, "%s", msg);
    cr_assert_eq(rad_opschema_check("silu_mul", ok, 2, 1, "p", msg, sizeof msg), RAD_E_ARG);
    cr_assert(strstr(msg, "at most 0") != NULL, "%s", msg);
    /* attn_paged's M is the sequence-chunk parameter the core cuts steps on */
    RadParam attn[] = {RAD_RANGE("M", 1, 64), RAD_INT("n_head", 9), RAD_INT("n_head_kv", 3), RAD_INT("head_dim", 64),
                       RAD_INT("kv", 0), RAD_INT("layer", 0), RAD_FLOAT("scale", 0.125), RAD_INT("prefill_fp8", 0)};
    cr_assert_eq(rad_opschema_check("attn_paged", attn, 8, 0, "p", msg, sizeof msg), RAD_E_ARG);
    cr_assert(strstr(msg, "role") != NULL, "%s", msg);
    attn[0] = RAD_RANGE_ROLE("M", 1, 64, RAD_PROLE_SEQ_CHUNK);
    cr_assert_eq(rad_opschema_check("attn_paged", attn, 8, 0, "p", msg, sizeof msg), RAD_OK, "%s", msg);
}

Test(opschema, the_first_plugin_to_declare_a_new_op_fixes_its_schema) {
    rad_opschema_reset();
    char msg[300] = "";
    RadParam a[] = {RAD_RANGE("M", 1, 64), RAD_INT("experts", 8)};
    cr_assert_not(rad_opschema_in_vocabulary("moe_route"));
    cr_assert_eq(rad_opschema_check("moe_route", a, 2, 1, "arch_first", msg, sizeof msg), RAD_OK, "%s", msg);
    cr_assert_eq(rad_opschema_check("moe_route", a, 2, 1, "arch_second", msg, sizeof msg), RAD_OK, "%s", msg);
    RadParam b[] = {RAD_RANGE("M", 1, 64), RAD_INT("n_expert", 8)};
    cr_assert_eq(rad_opschema_check("moe_route", b, 2, 1, "arch_second", msg, sizeof msg), RAD_E_ARG);
    cr_assert(strstr(msg, "fixed by arch_first") && strstr(msg, "'n_expert'"), "%s", msg);
    cr_assert_eq(rad_opschema_check("moe_route", a, 2, 2, "arch_second", msg, sizeof msg), RAD_E_ARG);
    rad_opschema_reset();
    cr_assert_eq(rad_opschema_check("moe_route", b, 2, 1, "arch_second", msg, sizeof msg), RAD_OK, "%s", msg);
    rad_opschema_reset();
}
