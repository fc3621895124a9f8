/* rad_plugin.h — what every plugin (.so) exports about itself, and the ABI-version law.
 *
 * Law: a plugin records the ABI it was built against (RAD_ABI_MAJOR/MINOR). The loader refuses
 * a plugin whose major differs from its own, or whose minor is newer than its own (it may call
 * what this core lacks). Within a major, public structs only grow at their end and carry
 * struct_size; a reader uses fields only when struct_size covers them, and treats the rest
 * as zero. Enum values and function signatures never change within a major. Structs passed in
 * arrays without their own size (RadParam, RadOperand, RadKArg, RadKvState, RadGroup) are
 * frozen for the whole major; a table of structs that carry struct_size (RadKernel) is
 * indexed by the producer's size (rad_kernel_at). */
#ifndef RAD_PLUGIN_H
#define RAD_PLUGIN_H

#include <stdint.h>

#define RAD_ABI_MAJOR 1u
#define RAD_ABI_MINOR 10u

typedef enum RadPluginKind {
    RAD_PLUGIN_ARCH = 1,    /* an architecture: declares and steps a model (abi/rad_arch.h) */
    RAD_PLUGIN_KERNELS = 2, /* a kernel library: implements ops (abi/rad_kernels.h) */
} RadPluginKind;

typedef struct RadPluginInfo {
    uint32_t struct_size;    /* sizeof(RadPluginInfo) as built by the plugin */
    uint32_t kind;           /* RadPluginKind */
    uint32_t abi_major;      /* RAD_ABI_MAJOR the plugin was built against */
    uint32_t abi_minor;
    const char *name;        /* unique among installed plugins: "llama", "llama_ggml", "ref" */
    const char *version;     /* the plugin's own version, "1.0.0" */
    const char *description; /* one line */
} RadPluginInfo;

/* Every plugin exports this (C linkage). */
typedef const RadPluginInfo *(*rad_plugin_info_fn)(void);

#if defined(__GNUC__)
#define RAD_EXPORT __attribute__((visibility("default")))
#else
#define RAD_EXPORT
#endif

#endif
