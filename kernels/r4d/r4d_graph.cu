/* r4d_graph.cu — decode steps as CUDA graphs, between the engine's step hooks (ABI 1.9).
 *
 * A decode step's launches are the same from one step to the next of the same shape: the same
 * kernels on the same arena, weights, staging and step image, only the bytes in them differ. So
 * per key (r4d_graph_key: phase, rows, sequences, output rows, the attention's context bucket):
 *   - the first step of a key runs eagerly (plans, rope tables and image buffers made then);
 *   - the second is captured on the rank's stream (relaxed mode) and its graph launched;
 *   - every later one replays: each run still checks its operands and stages its host data (the
 *     step image's pinned copy, which the graph's own copy node sends), but launches nothing, and
 *     step_end launches the graph.
 * Every run notes its identity and its operands' addresses in a fingerprint; a replay whose
 * fingerprint differs from its capture's launched nothing that step, so step_end fails the step
 * (by name, through the engine) and turns graphs off for good rather than run a wrong graph.
 * Steps of other phases (prefill, mixed, verify) and steps outside the hooks run eagerly.
 * R4D_GRAPHS=0 turns graphs off. */
#include <stdlib.h>
#include <string.h>

#include "r4d.cuh"

extern "C" uint32_t r4d_ctx_bucket(uint32_t max_ctx) {
    uint32_t b = 256;
    while (b < max_ctx && b < (1u << 30)) b <<= 1;
    return b;
}

static uint64_t mix(uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
    return h;
}

extern "C" int r4d_gate(const RadKernelArgs *a, const char *run) {
    R4dState *s = r4d_state(a);
    if (!s || s->mode == R4D_EAGER) return 0;
    uint64_t h = mix(s->print, (uint64_t)(uintptr_t)run);
    h = mix(h, (uint64_t)a->n);
    for (uint32_t i = 0; i < a->n_args; i++) h = mix(h, (uint64_t)(uintptr_t)a->args[i].data);
    h = mix(h, (uint64_t)(uintptr_t)a->workspace);
    if (a->kv) h = mix(h, (uint64_t)(uintptr_t)a->kv->pool);
    s->print = h;
    return s->mode == R4D_REPLAY;
}

extern "C" void r4d_graphs_free(R4dState *s) {
    for (int i = 0; i < s->n_gr; i++)
        if (s->gr[i].exec) cudaGraphExecDestroy(s->gr[i].exec);
    s->n_gr = 0;
}

extern "C" int r4d_step_begin(void *state, const RadBatch *b) {
    R4dState *s = (R4dState *)state;
    if (!s || !r4d_bind(s)) return RAD_E_ARG;
    s->mode = R4D_EAGER, s->print = 1469598103934665603ull, s->cur = -1;
    const int rc = r4d_comm_ready(s); /* a rank's communicator is made (or remade) here, never in a capture */
    if (rc) return rc;
    R4dGraphKey k;
    if (!s->graphs || !r4d_graph_key(b, r4d_ctx_bucket(b->max_ctx_len), &k)) return RAD_OK;
    int i = 0;
    while (i < s->n_gr && !r4d_graph_key_eq(&s->gr[i].key, &k)) i++;
    if (i == s->n_gr) {
        if (i == (int)(sizeof s->gr / sizeof *s->gr)) return RAD_OK; /* every slot taken: eager */
        memset(&s->gr[i], 0, sizeof s->gr[i]);
        s->gr[i].key = k, s->n_gr++;
    }
    struct R4dState::R4dGraph *g = &s->gr[i];
    s->cur = i;
    if (g->exec) {
        s->mode = R4D_REPLAY;
    } else if (!g->seen++) {
        s->mode = R4D_EAGER; /* the warm-up: whatever is made once is made now, outside any capture */
    } else {
        if (!s->side && cudaStreamCreateWithFlags(&s->side, cudaStreamNonBlocking) != cudaSuccess) return RAD_E_IO;
        if (cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) return RAD_E_IO;
        s->mode = R4D_CAPTURE;
    }
    return RAD_OK;
}

extern "C" int r4d_step_end(void *state, int ok) {
    R4dState *s = (R4dState *)state;
    if (!r4d_bind(s)) return RAD_E_ARG;
    const int mode = s->mode;
    s->mode = R4D_EAGER;
    if (mode == R4D_EAGER) return RAD_OK;
    struct R4dState::R4dGraph *g = &s->gr[s->cur];
    if (mode == R4D_CAPTURE) {
        cudaGraph_t graph = NULL;
        const cudaError_t ce = cudaStreamEndCapture(s->stream, &graph);
        int rc = RAD_OK;
        if (ce != cudaSuccess || !graph) rc = RAD_E_IO;
        else if (ok && cudaGraphInstantiate(&g->exec, graph, 0) != cudaSuccess) g->exec = NULL, rc = RAD_E_IO;
        if (graph) cudaGraphDestroy(graph);
        if (rc || !ok) { /* nothing of the step ran: a failed capture turns graphs off */
            if (g->exec) cudaGraphExecDestroy(g->exec), g->exec = NULL;
            if (rc) s->graphs = 0;
            return rc;
        }
        g->print = s->print;
        return cudaGraphLaunch(g->exec, s->stream) == cudaSuccess ? RAD_OK : RAD_E_IO;
    }
    if (!ok) return RAD_OK; /* a replay whose step failed: nothing to launch */
    if (s->print != g->print) { /* the step issued other launches than the captured ones */
        s->graphs = 0;
        r4d_graphs_free(s);
        return RAD_E_IO;
    }
    return cudaGraphLaunch(g->exec, s->stream) == cudaSuccess ? RAD_OK : RAD_E_IO;
}
