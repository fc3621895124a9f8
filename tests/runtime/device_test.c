/* A CUDA deployment's engine side, checked on the CPU (docs/ENGINE.md, "A CUDA deployment").
 *
 * tests/plugins/kern_fakedev.c says it is a CUDA library and serves libref's kernels behind
 * device-memory hooks, failing any call given a pointer a device library could not use (host
 * memory where device memory is due, raw operands without their host values, a device batch).
 * On SmolLM2 the engine on it must give libref's logits bit for bit (every position of a
 * prompt, and a greedy continuation), with the weights uploaded and the host copy released, the
 * logits copied back, the device synced each step, its step hooks called around each step in
 * order. Then: the refusals of what a CUDA deployment
 * does not do (--tp, --mmap), one library per deployment, and the fallback --kernels asks for: a
 * CUDA library whose init fails gives way to the CPU libraries after it in the list, with one
 * warning, and is an error naming it (and why) when nothing follows. libr4d itself (where nvcc
 * built it and no GPU is here): its init refuses in one line, naming "no CUDA device". */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcommon/runtime/rad_engine_int.h"
#include "libcommon/runtime/rad_sampler.h"
#include "tests/test_util.h"

static char dir[256], model[300], pd_test[300], pd_ref[256], pd_cuda[256];
static const char *dirs[3];

static const char *bdir(void) {
    const char *b = getenv("RAD_BUILD");
    return b && *b ? b : "build";
}
static void setup(void) {
    test_deadline(600);
    unsetenv("RAD_FAKEDEV_FAIL");
    unsetenv("RAD_FAKEDEV_DEVICES");
    snprintf(dir, sizeof dir, "/tmp/rad-dev-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(model, sizeof model, "%s/smollm2.rad", dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/rad-convert models/SmolLM2-135M-Instruct.Q4_1.gguf -o %s >/dev/null 2>&1", bdir(), model);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    /* a folder with fakedev alone (test-plugins holds architecture plugins that clash), libref's
     * path given to it */
    char cwd[200], ref[512];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    snprintf(pd_test, sizeof pd_test, "%s/fd", dir);
    snprintf(cmd, sizeof cmd, "mkdir %s && ln -s %s/%s/test-plugins/kern_fakedev.so %s/", pd_test, cwd, bdir(), pd_test);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    snprintf(ref, sizeof ref, "%s/%s/plugins/kern_ref.so", cwd, bdir());
    setenv("RAD_FAKEDEV_REF", ref, 1);
    snprintf(pd_ref, sizeof pd_ref, "%s/plugins", bdir());
    snprintf(pd_cuda, sizeof pd_cuda, "%s/plugins-cuda", bdir());
    dirs[0] = pd_test, dirs[1] = pd_ref, dirs[2] = pd_cuda;
}
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
    unsetenv("RAD_FAKEDEV_FAIL");
    unsetenv("RAD_FAKEDEV_DEVICES");
    unsetenv("RAD_FAKEDEV_REF");
}
TestSuite(device, .init = setup, .fini = teardown);

static RadEngineOpts opts(const char *kernels) {
    return (RadEngineOpts){.model = model, .plugin_dirs = dirs, .n_plugin_dirs = 2, .kernels = kernels, .n_threads = 2,
                           .max_tok = 32, .max_seqs = 2, .max_ctx = 128, .max_out_rows = 32};
}

static void counts(unsigned long c[8]) {
    char path[400];
    snprintf(path, sizeof path, "%s/kern_fakedev.so", pd_test);
    void *dl = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    cr_assert_not_null(dl, "kern_fakedev.so is not loaded");
    void (*fn)(unsigned long *);
    void *p = dlsym(dl, "fakedev_counts");
    cr_assert_not_null(p);
    memcpy(&fn, &p, sizeof p);
    fn(c);
    dlclose(dl);
}

/* The same model on libref (*cpu) and on the stand-in CUDA library (*dev), each at --tp tp. */
static void open_pair(RadEngine **cpu, RadEngine **dev, uint32_t tp) {
    RadErr e = {0};
    RadEngineOpts oc = opts("ref"), od = opts("fakedev");
    oc.tp = od.tp = tp;
    cr_assert_eq(rad_engine_open(cpu, &oc, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_engine_open(dev, &od, &e), RAD_OK, "%s", e.msg);
}

Test(device, a_cuda_deployment_gives_the_cpu_logits_bit_for_bit) {
    RadErr e = {0};
    RadEngine *cpu = NULL, *dev = NULL;
    open_pair(&cpu, &dev, 1);
    cr_assert_not_null(dev->dev, "fakedev says CUDA: the engine should deploy on it");
    cr_assert_null(dev->wstore, "the weights' host copy is released once uploaded");
    cr_assert_not_null(dev->dev_weights);
    cr_assert_null(cpu->dev);
    unsigned long c0[8];
    counts(c0);
    const int32_t prompt[12] = {1, 9690, 314, 253, 2156, 28, 1073, 314, 260, 1345, 282, 4237};
    uint32_t nv = 0;
    rad_engine_logits(cpu, &nv);
    cr_assert_gt(nv, 1000);
    float *a = malloc(sizeof(float) * 12 * nv), *b = malloc(sizeof(float) * 12 * nv);
    cr_assert_eq(rad_engine_forward_all(cpu, 0, prompt, 12, 0, a, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_engine_forward_all(dev, 0, prompt, 12, 0, b, &e), RAD_OK, "%s", e.msg);
    for (size_t i = 0; i < (size_t)12 * nv; i++)
        cr_assert_eq(f32_bits(a[i]), f32_bits(b[i]), "position %zu, token %zu: %g on the CPU, %g on the device", i / nv, i % nv,
                     (double)a[i], (double)b[i]);
    /* a greedy continuation, one decode step at a time */
    int32_t tc = prompt[11], td = prompt[11];
    rad_engine_drop_seq(cpu, 0), rad_engine_drop_seq(dev, 0);
    cr_assert_eq(rad_engine_forward(cpu, 0, prompt, 11, 0, 0, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_engine_forward(dev, 0, prompt, 11, 0, 0, &e), RAD_OK, "%s", e.msg);
    for (uint32_t step = 0; step < 16; step++) {
        cr_assert_eq(rad_engine_forward(cpu, 0, &tc, 1, 11 + step, 1, &e), RAD_OK, "%s", e.msg);
        cr_assert_eq(rad_engine_forward(dev, 0, &td, 1, 11 + step, 1, &e), RAD_OK, "%s", e.msg);
        const float *lc = rad_engine_logits(cpu, NULL), *ld = rad_engine_logits(dev, NULL);
        int32_t bc = 0, bd = 0;
        for (uint32_t v = 1; v < nv; v++) bc = lc[v] > lc[bc] ? (int32_t)v : bc, bd = ld[v] > ld[bd] ? (int32_t)v : bd;
        cr_assert_eq(memcmp(lc, ld, sizeof(float) * nv), 0, "decode step %u: the logits differ", step);
        cr_assert_eq(bc, bd);
        tc = bc, td = bd;
    }
    unsigned long c1[8];
    counts(c1);
    cr_assert_gt(c1[0], c0[0], "no raw operand was copied to the device");
    cr_assert_geq(c1[4] - c0[4], 17, "every step opens with step_begin (%lu)", c1[4] - c0[4]);
    cr_assert_eq(c1[4] - c0[4], c1[5] - c0[5], "every step_begin has its step_end");
    cr_assert_eq(c1[6], 0, "a step hook or a sync out of order (%lu)", c1[6]);
    cr_assert_geq(c1[1] - c0[1], 17, "the logits of every step come back (%lu copies)", c1[1] - c0[1]);
    cr_assert_geq(c1[2] - c0[2], 17, "every step syncs the device (%lu syncs)", c1[2] - c0[2]);
    cr_assert_gt(c1[3], c0[3]);
    free(a), free(b);
    rad_engine_close(cpu), rad_engine_close(dev);
}

static void refused(RadEngineOpts o, const char *want) {
    RadEngine *en = NULL;
    RadErr e = {0};
    cr_assert_neq(rad_engine_open(&en, &o, &e), RAD_OK, "opened; wanted a refusal naming '%s'", want);
    cr_assert(strstr(e.msg, want), "the refusal does not say '%s': %s", want, e.msg);
    cr_assert_null(strchr(e.msg, '\n'), "not one line: %s", e.msg);
}

Test(device, what_a_cuda_deployment_does_not_do_is_refused_by_name) {
    RadEngineOpts o = opts("fakedev");
    o.mmap_weights = 1;
    refused(o, "--mmap: kernel library 'fakedev' is a CUDA library");
    /* a CUDA library after a CPU one: the deployment is the first item's device */
    refused(opts("ref,fakedev"), "'fakedev' is a CUDA library");
}

/* --tp 2 on the "device": each rank an engine on its own fakedev state (device_index = rank),
 * whose memory no other rank's kernel, copy or free may touch; the logits are the CPU's --tp 2
 * logits bit for bit (the same libref kernels, the exact wire), prompt and greedy decode. */
Test(device, tensor_parallel_ranks_each_deploy_on_their_own_device) {
    RadErr e = {0};
    RadEngine *cpu = NULL, *dev = NULL;
    unsigned long c0[8];
    open_pair(&cpu, &dev, 2);
    counts(c0);
    RadEngine *r1 = rad_engine_rank(dev, 1);
    cr_assert_not_null(r1);
    cr_assert(dev->dev && r1->dev, "both ranks deploy on the CUDA library");
    cr_assert_neq(dev->dev_state, r1->dev_state, "a state per rank");
    cr_assert(!dev->wstore && !r1->wstore && dev->dev_weights && r1->dev_weights, "each rank's slices are uploaded");
    const int32_t prompt[12] = {1, 9690, 314, 253, 2156, 28, 1073, 314, 260, 1345, 282, 4237};
    uint32_t nv = 0;
    rad_engine_logits(cpu, &nv);
    float *a = malloc(sizeof(float) * 12 * nv), *b = malloc(sizeof(float) * 12 * nv);
    cr_assert_eq(rad_engine_forward_all(cpu, 0, prompt, 12, 0, a, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_engine_forward_all(dev, 0, prompt, 12, 0, b, &e), RAD_OK, "%s", e.msg);
    for (size_t i = 0; i < (size_t)12 * nv; i++)
        cr_assert_eq(f32_bits(a[i]), f32_bits(b[i]), "position %zu, token %zu: %g on the CPU, %g on the devices", i / nv, i % nv,
                     (double)a[i], (double)b[i]);
    int32_t t = prompt[11];
    rad_engine_drop_seq(cpu, 0), rad_engine_drop_seq(dev, 0);
    cr_assert_eq(rad_engine_forward(cpu, 0, prompt, 11, 0, 0, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_engine_forward(dev, 0, prompt, 11, 0, 0, &e), RAD_OK, "%s", e.msg);
    for (uint32_t step = 0; step < 8; step++) {
        cr_assert_eq(rad_engine_forward(cpu, 0, &t, 1, 11 + step, 1, &e), RAD_OK, "%s", e.msg);
        cr_assert_eq(rad_engine_forward(dev, 0, &t, 1, 11 + step, 1, &e), RAD_OK, "%s", e.msg);
        const float *lc = rad_engine_logits(cpu, NULL), *ld = rad_engine_logits(dev, NULL);
        cr_assert_eq(memcmp(lc, ld, sizeof(float) * nv), 0, "decode step %u: the logits differ", step);
        int32_t best = 0;
        for (uint32_t v = 1; v < nv; v++) best = lc[v] > lc[best] ? (int32_t)v : best;
        t = best;
    }
    unsigned long c1[8];
    counts(c1);
    cr_assert_eq(c1[6], 0, "a hook out of order or a free of another rank's memory (%lu)", c1[6]);
    cr_assert_geq(c1[4] - c0[4], 2 * 10, "every rank opens every step with step_begin (%lu)", c1[4] - c0[4]);
    cr_assert_eq(c1[4] - c0[4], c1[5] - c0[5]);
    free(a), free(b);
    rad_engine_close(cpu), rad_engine_close(dev);
}

/* A rank that cannot start on its device is an error naming the rank, fallback list or not (a
 * rank on the CPU could not join the device's collectives); a library that fails on rank 0 sends
 * every rank to the fallback. */
Test(device, a_rank_without_its_device_is_refused_by_rank) {
    setenv("RAD_FAKEDEV_DEVICES", "1", 1);
    RadEngineOpts o = opts("fakedev");
    o.tp = 2;
    refused(o, "--tp 2: rank 1: kernel library 'fakedev' (");
    refused(o, "device_index past the machine's devices");
    o.kernels = "fakedev,ref";
    refused(o, "--tp 2: rank 1: kernel library 'fakedev' (");
    unsetenv("RAD_FAKEDEV_DEVICES");
    setenv("RAD_FAKEDEV_FAIL", "1", 1);
    RadEngine *en = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_engine_open(&en, &o, &e), RAD_OK, "--kernels fakedev,ref --tp 2: %s", e.msg);
    for (uint32_t r = 0; r < 2; r++) {
        const RadEngine *q = rad_engine_rank(en, r);
        cr_assert(q && !q->dev && q->n_libs == 1 && !strcmp(q->libs[0]->info->name, "ref"), "rank %u is not on 'ref'", r);
    }
    rad_engine_close(en);
}

Test(device, a_failing_cuda_library_falls_back_only_where_the_list_goes_on) {
    setenv("RAD_FAKEDEV_FAIL", "1", 1);
    refused(opts("fakedev"), "kernel library 'fakedev' (");
    refused(opts("fakedev"), "init failed: no device (RAD_FAKEDEV_FAIL)");
    RadEngineOpts o = opts("fakedev,ref");
    RadEngine *en = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_engine_open(&en, &o, &e), RAD_OK, "--kernels fakedev,ref: %s", e.msg);
    cr_assert_null(en->dev, "the fallback is a CPU deployment");
    cr_assert_eq(en->n_libs, 1);
    cr_assert_str_eq(en->libs[0]->info->name, "ref");
    rad_engine_close(en);
}

Test(device, libr4d_without_a_gpu_refuses_in_one_line) {
    char so[300];
    snprintf(so, sizeof so, "%s/kern_r4d.so", pd_cuda);
    if (access(so, R_OK)) cr_skip_test("%s not built (no nvcc where this build ran)", so);
    RadEngineOpts o = opts("r4d");
    o.n_plugin_dirs = 3;
    RadEngine *en = NULL;
    RadErr e = {0};
    const int rc = rad_engine_open(&en, &o, &e);
    if (rc == RAD_OK) {
        rad_engine_close(en);
        cr_skip_test("a CUDA device is present: tests/gpu/check.sh checks libr4d there");
    }
    cr_assert(strstr(e.msg, "kernel library 'r4d' (") && strstr(e.msg, "init failed: no CUDA device"), "%s", e.msg);
    cr_assert_null(strchr(e.msg, '\n'));
    o.kernels = "r4d,ref"; /* asked for: the CPU library serves */
    cr_assert_eq(rad_engine_open(&en, &o, &e), RAD_OK, "%s", e.msg);
    cr_assert_null(en->dev);
    rad_engine_close(en);
}

/* rad-kbench --kernels fakedev,ref with `flags` on the SmolLM2 container: its JSON report (to
 * free), and in *rows / *pass the rows whose kernel starts with `prefix` and how many pass. */
static char *kbench_fakedev(const char *flags, const char *prefix, size_t *rows, size_t *pass) {
    char cmd[2048], out[400], want[80];
    snprintf(out, sizeof out, "%s/k.json", dir);
    snprintf(cmd, sizeof cmd,
             "%s/rad-kbench -m %s --kernels fakedev,ref --quick --threads 2 --plugin-dir %s --max-mixed-tok 16 --max-seqs 2 "
             "--ctx 128 %s --json >%s 2>%s/k.err",
             bdir(), model, pd_test, flags, out, dir);
    const int rc = system(cmd);
    size_t n;
    char *j = slurp(out, &n);
    cr_assert_eq(rc, 0, "%s: exit %d", cmd, rc);
    snprintf(want, sizeof want, "\"kernel\": \"%s", prefix);
    *rows = *pass = 0;
    for (const char *p = j; (p = strstr(p, want)); p++) {
        ++*rows;
        const char *ok = strstr(p, "\"pass\": ");
        cr_assert_not_null(ok);
        *pass += !strncmp(ok + 8, "true", 4);
    }
    return j;
}

/* rad-kbench on a CUDA library: the case's operands sent to its memory, the outputs read back,
 * every kernel of it checked against the reference like any other (fakedev fails a call given
 * host memory, so a kernel passing here was given device memory throughout). */
Test(device, rad_kbench_checks_a_cuda_library_through_its_memory_hooks) {
    size_t fd, ok;
    char *j = kbench_fakedev("", "fakedev:", &fd, &ok);
    cr_assert_gt(fd, 50, "%zu fakedev rows", fd);
    cr_assert_eq(ok, fd, "%zu of %zu fakedev rows pass", ok, fd);
    for (const char *op = "embed_gather\0rmsnorm\0gemm_nt\0rope\0attn_paged\0silu_mul\0logits_gemm\0argmax\0"; *op; op += strlen(op) + 1) {
        char want[80];
        snprintf(want, sizeof want, "\"kernel\": \"fakedev:%s:", op);
        cr_assert_not_null(strstr(j, want), "no fakedev row for %s", op);
    }
    free(j);
}

/* rad-kbench --tp 2 on a CUDA library: each rank's collective runs on its own state with its
 * operands in that rank's memory (fakedev refuses another rank's), and rank 0's result is
 * checked; a rank that refuses poisons the communicator rather than leaving the others waiting. */
Test(device, rad_kbench_checks_a_cuda_library_s_collectives_on_every_rank) {
    size_t fd, ok;
    char *j = kbench_fakedev("--tp 2 --ops 'all_*'", "fakedev:all_", &fd, &ok);
    cr_assert_geq(fd, 4, "%zu fakedev collective rows", fd);
    cr_assert_eq(ok, fd, "%zu of %zu fakedev collective rows pass", ok, fd);
    cr_assert_not_null(strstr(j, "\"kernel\": \"fakedev:all_gather:"), "no all_gather row");
    free(j);
}

/* Greedy decode on the device: a step asked for ids runs the core's argmax there and copies back
 * one id a row (its logits stay on the device: rad_engine_logits is NULL for that step); each id is
 * the CPU's first maximum. The scheduler asks for it when every row is plain greedy: radiance's
 * greedy text on the "device" is the CPU's. */
Test(device, greedy_steps_copy_back_ids_not_logits) {
    RadErr e = {0};
    RadEngine *cpu = NULL, *dev = NULL;
    open_pair(&cpu, &dev, 1);
    cr_assert(rad_engine_serves_ids(dev), "fakedev serves libref's argmax: the engine should answer with ids");
    cr_assert(!rad_engine_serves_ids(cpu), "a CPU deployment reads its logits where they are");
    const int32_t prompt[11] = {1, 9690, 314, 253, 2156, 28, 1073, 314, 260, 1345, 282};
    cr_assert_eq(rad_engine_forward(cpu, 0, prompt, 10, 0, 0, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_engine_forward(dev, 0, prompt, 10, 0, 0, &e), RAD_OK, "%s", e.msg);
    int32_t t = prompt[10];
    for (uint32_t step = 0; step < 12; step++) {
        uint32_t nv = 0;
        cr_assert_eq(rad_engine_forward(cpu, 0, &t, 1, 10 + step, 1, &e), RAD_OK, "%s", e.msg);
        const float *lc = rad_engine_logits(cpu, &nv);
        const int32_t want = (int32_t)rad_argmax(lc, nv);
        const int ask = step % 3 != 2; /* every third step without: the logits come back as before */
        rad_engine_want_ids(dev, ask);
        cr_assert_eq(rad_engine_forward(dev, 0, &t, 1, 10 + step, 1, &e), RAD_OK, "%s", e.msg);
        const int32_t *ids = rad_engine_ids(dev);
        uint32_t dv = 0;
        const float *ld = rad_engine_logits(dev, &dv);
        cr_assert_eq(dv, nv);
        if (ask) {
            cr_assert_not_null(ids, "step %u: no ids", step);
            cr_assert_null(ld, "step %u: the logits stayed on the device", step);
            cr_assert_eq(ids[0], want, "step %u: id %d, the CPU's argmax %d", step, ids[0], want);
        } else {
            cr_assert_null(ids, "step %u: ids not asked for", step);
            cr_assert_not_null(ld);
            cr_assert_eq((int32_t)rad_argmax(ld, dv), want);
        }
        t = want;
    }
    rad_engine_close(cpu), rad_engine_close(dev);
    /* the scheduler's greedy decode through it (radiance -p), against the CPU's */
    char cmd[2048], out[2][400];
    for (int k = 0; k < 2; k++) {
        snprintf(out[k], sizeof out[k], "%s/g%d.txt", dir, k);
        snprintf(cmd, sizeof cmd,
                 "%s/radiance --model %s --kernels %s --plugin-dir %s --plugin-dir %s --ids 1,9690,314,253,2156 -n 24 --temp 0 "
                 "--print-ids --ignore-eos --threads 2 >%s 2>/dev/null",
                 bdir(), model, k ? "ref" : "fakedev", pd_test, pd_ref, out[k]);
        cr_assert_eq(system(cmd), 0, "%s", cmd);
    }
    size_t n0, n1;
    char *a = slurp(out[0], &n0), *b = slurp(out[1], &n1);
    cr_assert_gt(n1, 24, "radiance printed %zu bytes of ids", n1);
    cr_assert(n0 == n1 && !memcmp(a, b, n0), "greedy ids on the device:\n%s\non the CPU:\n%s", a, b);
    free(a), free(b);
}
