/* rad_plugins.h — finding and loading plugins (.so) with dlopen, and choosing the architecture
 * plugin for a model. Plugins come from a plugin path, never from a model file:
 *   --plugin-dir DIR (repeatable), then $RADIANCE_PLUGIN_PATH (colon-separated), then
 *   $PREFIX/lib/radiance/plugins, then <dir of the running tool>/plugins (a build tree). */
#ifndef RAD_PLUGINS_H
#define RAD_PLUGINS_H

#include "abi/rad_arch.h"
#include "abi/rad_kernels.h"
#include "rad_err.h"

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

typedef struct RadPluginSet {
    RadPlugin *p;  /* [n] in load order */
    int n;
} RadPluginSet;

/* The search path, in order; extra_dirs (from --plugin-dir) come first. Returns a count and a
 * malloc'd array of malloc'd strings (free with rad_plugin_dirs_free). */
int rad_plugin_dirs(const char *const *extra_dirs, int n_extra, char ***out);
void rad_plugin_dirs_free(char **dirs, int n);

/* Loads every *.so in the given folders (missing folders are skipped). Refuses, naming both
 * paths, two plugins with the same name; refuses a plugin without rad_plugin_info, of another
 * ABI major or a newer minor, or lacking its kind's required exports. */
int rad_plugins_load(RadPluginSet *s, char *const *dirs, int n_dirs, RadErr *e);
/* Loads one plugin file into the set (same checks). */
int rad_plugins_load_file(RadPluginSet *s, const char *path, RadErr *e);
void rad_plugins_free(RadPluginSet *s);

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
} RadDeployFlags;

/* Runs the plugin's probe and refuses, naming the plugin and the flag, any switch whose bit
 * is 0. The probe's result is left in *probe. */
int rad_plugin_check_flags(const RadPlugin *p, const RadModelMeta *meta, const RadDeployFlags *f,
                           RadArchProbe *probe, RadErr *e);

#endif
