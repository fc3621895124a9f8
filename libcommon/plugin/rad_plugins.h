/* rad_plugins.h — finding and loading plugins (.so) with dlopen, and choosing the architecture
 * plugin for a model. Plugins come from a plugin path, never from a model file:
 *   --plugin-dir DIR (repeatable), then $RADIANCE_PLUGIN_PATH (colon-separated), then
 *   $PREFIX/lib/radiance/plugins, then <dir of the running tool>/plugins (a build tree). */
#ifndef RAD_PLUGINS_H
#define RAD_PLUGINS_H

#include "abi/rad_arch.h"
#include "abi/rad_kernels.h"
#include "libcommon/base/rad_err.h"

#ifndef RAD_PREFIX
#define RAD_PREFIX "/usr/local"
#endif

typedef struct RadPlugin {
    char path[1024];                 /* where it was loaded from */
    void *dl;                        /* dlopen handle */
    const RadPluginInfo *info;       /* name, version, kind, ABI */
    /* RAD_PLUGIN_ARCH */
    const char *arch_id;             /* rad_arch_id() */
    const char *quant;               /* rad_arch_quant(): "" unquantised */
    int serves_imports;              /* rad_arch_serves_imports(), 0 when not exported */
    rad_arch_declare_fn declare;
    rad_arch_step_fn step;
    rad_arch_probe_fn probe;         /* NULL when not exported */
    rad_arch_chat_format_fn chat_format;
    rad_arch_audio_format_fn audio_format;
    rad_arch_text_prepare_fn text_prepare;       /* the optional format exports, or NULL */
    rad_arch_video_positions_fn video_positions;
    rad_arch_video_pack_fn video_pack;
    rad_arch_encode_geom_fn encode_geom;
    /* RAD_PLUGIN_KERNELS */
    const RadKernelLib *lib;
} RadPlugin;

/* A file on the plugin path that was refused and left out (docs/PLUGINS.md, "A bad plugin"). */
typedef struct RadPluginSkip {
    char path[1024];                 /* control bytes shown as '?' */
    char name[64];                   /* rad_plugin_info's name when it was valid, else "" */
    char why[512];                   /* one line */
} RadPluginSkip;

typedef struct RadPluginSet {
    RadPlugin *p;  /* [n] in load order */
    int n;
    RadPluginSkip *skipped; /* [n_skipped] files rad_plugins_load refused and went on without */
    int n_skipped;
    int quiet;     /* set before loading: record skipped files without the stderr warning */
} RadPluginSet;

/* Limits on what a plugin may hand over (larger is refused as malformed). */
#define RAD_PLUGIN_MAX_KERNELS 4096u   /* RadKernelLib.n_kernels */
#define RAD_PLUGIN_MAX_NAME 63u        /* plugin, op, variant, arch id and quant names, in bytes */
#define RAD_PLUGIN_MAX_TEXT 255u       /* version and description, in bytes */
#define RAD_PLUGIN_MAX_KV_BLOCK 4096u  /* RadKernel.kv_block_size */
#define RAD_PLUGIN_MAX_DIRS 64u        /* folders on the plugin path, after de-duplication */

/* The search path, in order; extra_dirs (from --plugin-dir) come first. A folder named twice
 * (the same spelling, or the same folder by another path) is kept once, where it first appears;
 * empty $RADIANCE_PLUGIN_PATH entries are ignored (never "the current folder"); an empty
 * --plugin-dir is kept, for rad_plugins_load to refuse, and so is one folder past
 * RAD_PLUGIN_MAX_DIRS (the rest are not looked at). Returns a count and a malloc'd array
 * of malloc'd strings (free with rad_plugin_dirs_free). */
int rad_plugin_dirs(const char *const *extra_dirs, int n_extra, char ***out);
void rad_plugin_dirs_free(char **dirs, int n);

/* Loads every *.so in the given folders (missing folders are skipped). A file that cannot be
 * loaded or fails a check below is left out: recorded in s->skipped and, unless s->quiet, warned
 * about on stderr in one line ("<tool>: warning: plugin PATH skipped: WHY"); the rest load.
 * With RADIANCE_PLUGINS_STRICT=1 the first such file is the error instead. Errors: an empty
 * folder name, more than RAD_PLUGIN_MAX_DIRS folders, a bad RADIANCE_PLUGINS_STRICT value, out
 * of memory, and (strict) a bad file. */
int rad_plugins_load(RadPluginSet *s, char *const *dirs, int n_dirs, RadErr *e);
/* Loads one plugin file into the set, or refuses it: "plugin PATH: WHY". Checks: a regular
 * file, dlopen, rad_plugin_info (rad_plugin_info_check), a name no loaded plugin has, and its
 * kind's exports (rad_arch_exports_check, rad_kernel_lib_check). */
int rad_plugins_load_file(RadPluginSet *s, const char *path, RadErr *e);
void rad_plugins_free(RadPluginSet *s);

/* RADIANCE_PLUGINS_STRICT: unset, "" or "0" is 0, "1" is 1; anything else is RAD_E_ARG. */
int rad_plugins_strict(int *strict, RadErr *e);

/* The checks on what a plugin hands over, on in-memory structs (so they can be fuzzed). RAD_OK,
 * or a status with one line naming the struct field (or the kernel's index, op and variant)
 * and what is wrong. Every pointer is probed before it is read, so an unmapped one is refused,
 * not followed; a table is read only within its stated count and entry size. */
int rad_plugin_info_check(const RadPluginInfo *info, RadErr *e);
int rad_kernel_lib_check(const RadKernelLib *lib, RadErr *e);
/* An architecture plugin's rad_arch_id(), rad_arch_quant() and rad_arch_serves_imports(). */
int rad_arch_exports_check(const char *arch_id, const char *quant, int serves_imports, RadErr *e);

/* "; skipped: PATH (WHY), ..." for an error about a missing plugin, or "" when none was skipped. */
void rad_plugins_skip_note(const RadPluginSet *s, char *buf, size_t n);

/* How rad_plugins_pick_kernels reads a --kernels list. */
typedef enum RadPick {
    RAD_PICK_ALL = 0,     /* every item, each a library of `device` */
    RAD_PICK_ANY = 1,     /* every item, whatever its device (rad-kbench and rad-tune check them all) */
    RAD_PICK_LEADING = 2, /* the items before the first that is not an installed library of `device`:
                             *rest is the list after them ("" when all were taken); none taken is no
                             error (the deployment split: "r4d,ref" is a CUDA head and a CPU rest) */
} RadPick;

/* The kernel libraries for a device, in preference order: those a --kernels list names
 * ("r4d,ref"), else every loaded one of `device` in load order. Refuses, naming the item: an empty
 * list or item, a name given twice, a name no loaded kernel library has (saying so when a file of
 * that name was skipped, and why), a library for another device (RAD_PICK_ALL). out has room for
 * cap entries; rest (RAD_PICK_LEADING only, else may be NULL) gets the untaken tail. */
int rad_plugins_pick_kernels(const RadPluginSet *s, const char *list, RadDevice device, RadPick how,
                             const RadPlugin **out, int cap, int *n, const char **rest, RadErr *e);

/* The architecture plugin for (id, quant): an exact match, no fallback. A quantisation imported
 * from another tool (quant_origin "import:<tool>") is served by the family's one quantised
 * plugin that accepts imports; two such plugins are refused by name. Errors list what is
 * installed. */
int rad_plugins_find_arch(const RadPluginSet *s, const char *id, const char *quant,
                          const char *quant_origin, const RadPlugin **out, RadErr *e);

/* Deployment switches a plugin must permit through its probe bits. */
typedef struct RadDeployFlags {
    RadKvQuant kv_quant;       /* --kv-cache-dtype fp8_v4 / fp8_k6v4 */
    int control_vector;        /* --control-vector */
    int tp_attn_rows;          /* --tp-attn-split rows */
    int state_f16;             /* --state-cache-dtype f16 */
    int kv_resident;           /* --kv-resident */
    uint32_t spec_depth;       /* --spec-depth given (0: not given): a block drafter's probe
                                  (draft_depth_fixed) serves its draft_depth alone */
} RadDeployFlags;

/* Runs the plugin's probe and refuses, naming the plugin and the flag, any switch whose bit
 * is 0. The probe's result is left in *probe. */
int rad_plugin_check_flags(const RadPlugin *p, const RadModelMeta *meta, const RadDeployFlags *f,
                           RadArchProbe *probe, RadErr *e);

/* --control-vector FILE: llama.cpp's control-vector GGUF (one f32 [n_embd] tensor "direction.L"
 * per layer L >= 1, added to the residual stream after layer L) read and checked against the
 * model into *out, one allocation (the struct, then dirs: [n_layers][n_embd], row 0 and the
 * layers the file leaves out zero; scale 1) the caller free()s. Refuses, naming the file and the
 * tensor: a file that cannot be read, not a GGUF, no direction tensor, any other tensor, a
 * layer 0 or past the model's, a type other than f32, a length other than n_embd. */
int rad_cvec_load(const char *path, const RadModelMeta *meta, RadControlVector **out, RadErr *e);

/* The weights the core serves from a loaded control vector, beside the container's: the name
 * RAD_CVEC_WEIGHT_PREFIX "L" (L in 1..n_layers-1, strictly decimal) is row L of cv as a f32 [n_embd]
 * weight, the values a plugin adds to the residual stream after layer L (scale · dirs[L]; the
 * core's vectors have scale 1: llama.cpp's strength is in the values). The row, or NULL when
 * name is not one (or cv is NULL, or its scale is not 1). arch/common/rad_cvec.h declares them. */
#define RAD_CVEC_WEIGHT_PREFIX "cvec.direction." /* arch/common/rad_cvec.h spells it the same */
const float *rad_cvec_weight(const RadControlVector *cv, const char *name);

#endif
