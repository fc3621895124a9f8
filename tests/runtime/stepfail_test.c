/* rad_step_fail stops the step: an op issued after it in the same step does not run (the spec:
 * it "sets the status helpers return"), the step returns the plugin's reason, and the next step
 * runs normally. The plugin (tests/plugins/arch_stepfail.c) issues one `add`, fails, issues it
 * again; --profile's per-op call count shows what ran. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcommon/runtime/rad_engine_int.h" /* the per-op call counts */

#include "tests/test_util.h"
#include "tests/tiny_llama.h"

static char path[256];

static void write_container(const char *file, const char *arch_id) {
    RadErr e = {0};
    cr_assert_eq(tiny_arch_container(file, arch_id, &e), RAD_OK, "%s", e.msg);
}

static void setup(void) {
    snprintf(path, sizeof path, "/tmp/rad-stepfail-%d.rad", (int)getpid());
    write_container(path, "stepfail_test");
}
static void teardown(void) { unlink(path); }

TestSuite(stepfail, .init = setup, .fini = teardown);

Test(stepfail, no_issue_runs_after_rad_step_fail) {
    const char *b = getenv("RAD_BUILD");
    char d1[256], d2[256];
    snprintf(d1, sizeof d1, "%s/test-plugins", b ? b : "build");
    snprintf(d2, sizeof d2, "%s/plugins", b ? b : "build");
    const char *dirs[2] = {d1, d2};
    RadEngineOpts o = {.model = path, .plugin_dirs = dirs, .n_plugin_dirs = 2, .kernels = "kern_test", .max_tok = 8,
                       .max_seqs = 1, .max_ctx = 16, .n_threads = 1, .profile = 1};
    RadEngine *en = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_engine_open(&en, &o, &e), RAD_OK, "%s", e.msg);
    const int32_t ids[3] = {1, 2, 3};
    for (int round = 1; round <= 2; round++) { /* the failure is per step, not sticky */
        rad_err_clear(&e);
        cr_assert_neq(rad_engine_forward(en, 0, ids, 3, 0, 0, &e), RAD_OK, "the failed step succeeded");
        cr_assert(strstr(e.msg, "stepfail_test: failed on purpose"), "the plugin's reason is not the error: %s", e.msg);
        uint64_t calls = 0;
        for (uint64_t i = 0; i < en->prof_n; i++) calls += en->prof_calls[i];
        cr_assert_eq(calls, (uint64_t)round, "step %d: %llu kernel calls, the issue after rad_step_fail ran", round,
                     (unsigned long long)calls);
        rad_engine_drop_seq(en, 0);
    }
    rad_engine_close(en);
}

/* ---- tensor parallelism: a rank that fails releases the others ---------------------------------
 * tests/plugins/arch_tpfail.c issues add, all_reduce, add on every rank; RAD_TEST_TPFAIL=R makes
 * rank R fail before the all_reduce the other ranks wait in. The step must return (no rank left
 * waiting), with rank R's own reason, and the next step (no failure) runs on every rank. */
static char tp_path[256];

static void tp_setup(void) {
    snprintf(tp_path, sizeof tp_path, "/tmp/rad-tpfail-%d.rad", (int)getpid());
    write_container(tp_path, "tpfail_test");
}
static void tp_teardown(void) {
    unlink(tp_path);
    unsetenv("RAD_TEST_TPFAIL");
    unsetenv("RAD_TEST_KVZERO");
    unsetenv("RAD_FAKEDEV_ASYNC");
}

static int tp_open_on(uint32_t tp, const char *kernels, RadEngine **en, RadErr *e) {
    const char *b = getenv("RAD_BUILD");
    static char d1[256], d2[256];
    snprintf(d1, sizeof d1, "%s/test-plugins", b ? b : "build");
    snprintf(d2, sizeof d2, "%s/plugins", b ? b : "build");
    const char *dirs[2] = {d1, d2};
    RadEngineOpts o = {.model = tp_path, .plugin_dirs = dirs, .n_plugin_dirs = 2, .kernels = kernels, .max_tok = 8,
                       .max_seqs = 1, .max_ctx = 16, .n_threads = 1, .tp = tp};
    return rad_engine_open(en, &o, e);
}
static int tp_open(uint32_t tp, RadEngine **en, RadErr *e) { return tp_open_on(tp, "ref", en, e); }

/* For each rank in turn: that rank fails the step, which returns with its reason (not a release it
 * caused: a collective's RAD_E_IO, or a released rank's sync on a device); then, the failure
 * gone, the next steps on the same ranks run (the communicator usable again). */
static void each_rank_fails(const char *kernels) {
    const int32_t ids[3] = {1, 2, 3};
    for (int rank = 0; rank < 3; rank++) {
        char v[16];
        snprintf(v, sizeof v, "%d", rank);
        setenv("RAD_TEST_TPFAIL", v, 1);
        RadEngine *en = NULL;
        RadErr e = {0};
        cr_assert_eq(tp_open_on(3, kernels, &en, &e), RAD_OK, "%s", e.msg);
        cr_assert_neq(rad_engine_forward(en, 0, ids, 3, 0, 0, &e), RAD_OK, "rank %d failed and the step succeeded", rank);
        char want[96]; /* rank 0's reason as it is; another rank's prefixed with it */
        if (rank) snprintf(want, sizeof want, "rank %d: tpfail_test: this rank failed on purpose", rank);
        else snprintf(want, sizeof want, "step: tpfail_test: this rank failed on purpose");
        cr_assert(strstr(e.msg, want), "rank %d: not its own reason: %s", rank, e.msg);
        cr_assert(!strstr(e.msg, "RAD_E_IO") && !strstr(e.msg, "on the device"), "a release was reported, not the failure: %s",
                  e.msg);
        unsetenv("RAD_TEST_TPFAIL");
        for (int round = 0; round < 2; round++) {
            rad_engine_drop_seq(en, 0);
            cr_assert_eq(rad_engine_forward(en, 0, ids, 3, 0, 0, &e), RAD_OK, "after rank %d's failure: %s", rank, e.msg);
        }
        rad_engine_drop_seq(en, 0);
        rad_engine_close(en);
    }
}

Test(stepfail, a_failing_rank_releases_the_others, .init = tp_setup, .fini = tp_teardown) {
    test_deadline(60);
    each_rank_fails("ref");
}

/* The same on a device library whose collectives are queued (tests/plugins/kern_fakedev.c with
 * RAD_FAKEDEV_ASYNC=1, as NCCL's): a released rank's all_reduce returns at once and its sync
 * fails. The failing rank's reason is still the one reported, not a released rank's sync. */
Test(stepfail, a_failing_rank_releases_ranks_whose_collectives_are_queued, .init = tp_setup, .fini = tp_teardown) {
    test_deadline(60);
    setenv("RAD_FAKEDEV_ASYNC", "1", 1);
    each_rank_fails("fakedev");
}

Test(stepfail, a_zero_kv_group_is_refused_by_name, .init = tp_setup, .fini = tp_teardown) {
    setenv("RAD_TEST_KVZERO", "1", 1);
    RadEngine *en = NULL;
    RadErr e = {0};
    cr_assert_neq(tp_open(2, &en, &e), RAD_OK, "a group declared empty was accepted");
    cr_assert_null(en);
    cr_assert(strstr(e.msg, "KV group 'kv'") && strstr(e.msg, "tpfail_test") && strstr(e.msg, "rad_kv_group_zero"), "%s", e.msg);
}
