#include "rad_plugins.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static int push_dir(char ***v, int *n, const char *d) {
    char **nv = realloc(*v, (size_t)(*n + 1) * sizeof *nv);
    if (!nv) return -1;
    *v = nv;
    if (!(nv[*n] = dup_str(d))) return -1;
    (*n)++;
    return 0;
}

int rad_plugin_dirs(const char *const *extra, int n_extra, char ***out) {
    char **v = NULL;
    int n = 0;
    for (int i = 0; i < n_extra; i++) push_dir(&v, &n, extra[i]);
    const char *env = getenv("RADIANCE_PLUGIN_PATH");
    if (env && *env) {
        char *copy = dup_str(env), *save = NULL;
        for (char *t = copy ? strtok_r(copy, ":", &save) : NULL; t; t = strtok_r(NULL, ":", &save))
            if (*t) push_dir(&v, &n, t);
        free(copy);
    }
    push_dir(&v, &n, RAD_PREFIX "/lib/radiance/plugins");
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 16);
    if (k > 0) {
        exe[k] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            strcpy(slash, "/plugins");
            push_dir(&v, &n, exe);
        }
    }
    *out = v;
    return n;
}

void rad_plugin_dirs_free(char **dirs, int n) {
    for (int i = 0; i < n; i++) free(dirs[i]);
    free(dirs);
}

void rad_plugins_free(RadPluginSet *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++)
        if (s->p[i].dl) dlclose(s->p[i].dl);
    free(s->p);
    s->p = NULL;
    s->n = 0;
}

/* dlsym into a function pointer without the object-to-function cast warning. */
static void *sym(void *dl, const char *name) { return dlsym(dl, name); }
#define LOAD_FN(dst, dl, name) do { void *p_ = sym(dl, name); memcpy(&(dst), &p_, sizeof p_); } while (0)

int rad_plugins_load_file(RadPluginSet *s, const char *path, RadErr *e) {
    RadPlugin p;
    memset(&p, 0, sizeof p);
    snprintf(p.path, sizeof p.path, "%s", path);
    p.dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!p.dl) return rad_err_set(e, RAD_E_IO, "plugin %s: cannot load: %s", path, dlerror());
    rad_plugin_info_fn info_fn;
    LOAD_FN(info_fn, p.dl, "rad_plugin_info");
    int rc = RAD_OK;
    if (!info_fn) {
        rc = rad_err_set(e, RAD_E_FORMAT, "plugin %s: exports no rad_plugin_info", path);
        goto fail;
    }
    p.info = info_fn();
    if (!p.info || p.info->struct_size < offsetof(RadPluginInfo, description) + sizeof(char *) || !p.info->name) {
        rc = rad_err_set(e, RAD_E_FORMAT, "plugin %s: rad_plugin_info is malformed", path);
        goto fail;
    }
    if (p.info->abi_major != RAD_ABI_MAJOR || p.info->abi_minor > RAD_ABI_MINOR) {
        rc = rad_err_set(e, RAD_E_UNSUPPORTED, "plugin '%s' (%s): built for ABI %u.%u, this core serves %u.0..%u.%u",
                         p.info->name, path, p.info->abi_major, p.info->abi_minor, RAD_ABI_MAJOR, RAD_ABI_MAJOR, RAD_ABI_MINOR);
        goto fail;
    }
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->p[i].info->name, p.info->name) == 0) {
            rc = rad_err_set(e, RAD_E_ARG, "two plugins named '%s': %s and %s (names must be unique)",
                             p.info->name, s->p[i].path, path);
            goto fail;
        }
    if (p.info->kind == RAD_PLUGIN_ARCH) {
        const char *(*id_fn)(void), *(*quant_fn)(void);
        int (*imports_fn)(void);
        LOAD_FN(id_fn, p.dl, "rad_arch_id");
        LOAD_FN(quant_fn, p.dl, "rad_arch_quant");
        LOAD_FN(imports_fn, p.dl, "rad_arch_serves_imports");
        LOAD_FN(p.declare, p.dl, "rad_arch_declare");
        LOAD_FN(p.step, p.dl, "rad_arch_step");
        LOAD_FN(p.probe, p.dl, "rad_arch_probe");
        LOAD_FN(p.chat_format, p.dl, "rad_arch_chat_format");
        LOAD_FN(p.audio_format, p.dl, "rad_arch_audio_format");
        LOAD_FN(p.text_prepare, p.dl, "rad_arch_text_prepare");
        LOAD_FN(p.video_positions, p.dl, "rad_arch_video_positions");
        LOAD_FN(p.video_pack, p.dl, "rad_arch_video_pack");
        LOAD_FN(p.encode_geom, p.dl, "rad_arch_encode_geom");
        if (!id_fn || !quant_fn || !p.declare || !p.step) {
            rc = rad_err_set(e, RAD_E_FORMAT, "architecture plugin '%s' (%s): lacks rad_arch_id, rad_arch_quant, "
                             "rad_arch_declare or rad_arch_step", p.info->name, path);
            goto fail;
        }
        p.arch_id = id_fn();
        p.quant = quant_fn();
        p.serves_imports = imports_fn ? imports_fn() : 0;
        if (!p.arch_id || !*p.arch_id || !p.quant) {
            rc = rad_err_set(e, RAD_E_FORMAT, "architecture plugin '%s' (%s): empty rad_arch_id", p.info->name, path);
            goto fail;
        }
    } else if (p.info->kind == RAD_PLUGIN_KERNELS) {
        rad_kernels_fn k;
        LOAD_FN(k, p.dl, "rad_kernels");
        p.lib = k ? k() : NULL;
        if (!p.lib || p.lib->struct_size < offsetof(RadKernelLib, init)) {
            rc = rad_err_set(e, RAD_E_FORMAT, "kernel library '%s' (%s): lacks rad_kernels or its table is malformed",
                             p.info->name, path);
            goto fail;
        }
    } else {
        rc = rad_err_set(e, RAD_E_UNSUPPORTED, "plugin '%s' (%s): unknown kind %u", p.info->name, path, p.info->kind);
        goto fail;
    }
    RadPlugin *np = realloc(s->p, (size_t)(s->n + 1) * sizeof *np);
    if (!np) {
        rc = rad_err_set(e, RAD_E_NOMEM, "out of memory loading %s", path);
        goto fail;
    }
    s->p = np;
    s->p[s->n++] = p;
    return RAD_OK;
fail:
    dlclose(p.dl);
    return rc;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int rad_plugins_load(RadPluginSet *s, char *const *dirs, int n_dirs, RadErr *e) {
    for (int d = 0; d < n_dirs; d++) {
        DIR *dir = opendir(dirs[d]);
        if (!dir) continue;
        char **names = NULL;
        int n = 0;
        struct dirent *de;
        while ((de = readdir(dir))) {
            size_t l = strlen(de->d_name);
            if (l > 3 && strcmp(de->d_name + l - 3, ".so") == 0 && de->d_name[0] != '.') push_dir(&names, &n, de->d_name);
        }
        closedir(dir);
        qsort(names, (size_t)n, sizeof *names, cmp_str); /* a stable order, whatever readdir says */
        int rc = RAD_OK;
        for (int i = 0; i < n && !rc; i++) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dirs[d], names[i]);
            rc = rad_plugins_load_file(s, path, e);
        }
        rad_plugin_dirs_free(names, n);
        if (rc) return rc;
    }
    return RAD_OK;
}

static void list_arch(const RadPluginSet *s, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < s->n && k < n; i++) {
        if (s->p[i].info->kind != RAD_PLUGIN_ARCH) continue;
        k += (size_t)snprintf(buf + k, n - k, "%s%s(%s, \"%s\")", k ? ", " : "", s->p[i].info->name, s->p[i].arch_id, s->p[i].quant);
    }
    if (!buf[0]) snprintf(buf, n, "none");
}

int rad_plugins_find_arch(const RadPluginSet *s, const char *id, const char *quant, const char *origin,
                          const RadPlugin **out, RadErr *e) {
    *out = NULL;
    if (!quant) quant = "";
    for (int i = 0; i < s->n; i++) {
        const RadPlugin *p = &s->p[i];
        if (p->info->kind == RAD_PLUGIN_ARCH && strcmp(p->arch_id, id) == 0 && strcmp(p->quant, quant) == 0) {
            *out = p;
            return RAD_OK;
        }
    }
    char have[1024];
    list_arch(s, have, sizeof have);
    if (origin && strncmp(origin, "import:", 7) == 0) {
        const RadPlugin *found = NULL;
        for (int i = 0; i < s->n; i++) {
            const RadPlugin *p = &s->p[i];
            if (p->info->kind != RAD_PLUGIN_ARCH || strcmp(p->arch_id, id) != 0 || !p->quant[0] || !p->serves_imports) continue;
            if (found)
                return rad_err_set(e, RAD_E_ARG, "two plugins serve imported '%s' quantisations of '%s': '%s' and '%s' "
                                   "(one family has one importing plugin)", quant, id, found->info->name, p->info->name);
            found = p;
        }
        if (found) {
            *out = found;
            return RAD_OK;
        }
        return rad_err_set(e, RAD_E_NOTFOUND, "no plugin serves architecture '%s' with the imported quantisation '%s' (%s); installed: %s",
                           id, quant, origin, have);
    }
    int known = 0;
    for (int i = 0; i < s->n; i++)
        if (s->p[i].info->kind == RAD_PLUGIN_ARCH && strcmp(s->p[i].arch_id, id) == 0) known = 1;
    if (!known)
        return rad_err_set(e, RAD_E_NOTFOUND, "unknown architecture '%s'; installed: %s", id, have);
    return rad_err_set(e, RAD_E_NOTFOUND, "no plugin for ('%s', \"%s\"); installed: %s", id, quant, have);
}

int rad_plugin_check_flags(const RadPlugin *p, const RadModelMeta *meta, const RadDeployFlags *f,
                           RadArchProbe *probe, RadErr *e) {
    memset(probe, 0, sizeof *probe);
    probe->struct_size = sizeof *probe;
    if (p->probe) {
        int rc = p->probe(meta, probe);
        if (rc) return rad_err_set(e, RAD_E_ARG, "plugin '%s': its probe refused this model (status %d)", p->info->name, rc);
    }
    const char *flag = NULL;
    if (f->kv_quant != RAD_KVQ_NONE && !(probe->kv_quant_ok & (1u << f->kv_quant)))
        flag = f->kv_quant == RAD_KVQ_V4 ? "--kv-cache-dtype fp8_v4" : "--kv-cache-dtype fp8_k6v4";
    else if (f->control_vector && !probe->control_vector_ok) flag = "--control-vector";
    else if (f->tp_attn_rows && !probe->tp_attn_rows_ok) flag = "--tp-attn-split rows";
    else if (f->state_f16 && !probe->state_f16_ok) flag = "--state-cache-dtype f16";
    else if (f->kv_resident && !probe->kv_stream_ok) flag = "--kv-resident";
    if (flag)
        return rad_err_set(e, RAD_E_ARG, "%s: plugin '%s' does not serve it (its probe bit is 0)", flag, p->info->name);
    return RAD_OK;
}
