/* The include walls (scripts/check-walls.sh, docs/LAYOUT.md): the tree passes; a breach in a
 * scratch tree fails, naming the file; the script's own self-test plants one breach of each
 * kind (layers, cycles, internal headers, plugins, tools) in a copy of the tree. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

Test(walls, every_planted_breach_is_caught) {
    cr_assert_eq(system("sh scripts/check-walls.sh --self-test > /dev/null 2>&1"), 0,
                 "scripts/check-walls.sh --self-test: a planted breach passed (run it to see which)");
}

/* The wall check passes on the tree and fails, naming the file, on a breach. */
Test(walls, tree_is_clean_and_a_breach_fails) {
    cr_assert_eq(system("sh scripts/check-walls.sh >/dev/null"), 0);
    char d[] = "/tmp/rad-walls-XXXXXX";
    cr_assert_not_null(mkdtemp(d));
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/arch/llama %s/tools/a %s/tools/b && "
             "echo '#include \"abi/rad_types.h\"' > %s/arch/llama/ok.c && "
             "echo '#include \"libcommon/base/rad_dict.h\"' > %s/arch/llama/bad.c && "
             "echo '#include \"tools/b/x.h\"' > %s/tools/a/main.c && "
             "sh scripts/check-walls.sh %s > %s/out; echo $? > %s/rc", d, d, d, d, d, d, d, d, d);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "grep -q '^1$' %s/rc && grep -q 'arch/llama/bad.c' %s/out && "
             "grep -q 'tools/a/main.c' %s/out && ! grep -q ok.c %s/out", d, d, d, d);
    int rc = system(cmd);
    snprintf(cmd, sizeof cmd, "rm -rf %s", d);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(rc, 0, "check-walls did not report both breaches");
}

/* The engine is the one owner of its state and KV cache: a tool or another libcommon file that
 * includes rad_engine_int.h or rad_kvcache.h is a breach; the engine's own files and the public
 * header are not. */
Test(walls, only_the_engine_sees_its_state_and_kv_cache) {
    char d[] = "/tmp/rad-walls-XXXXXX";
    cr_assert_not_null(mkdtemp(d));
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/libcommon/runtime %s/tools/a && touch %s/libcommon/runtime/rad_engine_int.h %s/libcommon/runtime/rad_kvcache.h && "
             "printf '#include \"rad_engine_int.h\"\\n#include \"rad_kvcache.h\"\\n' > %s/libcommon/runtime/rad_engine.c && "
             "echo '#include \"rad_kvcache.h\"' > %s/libcommon/runtime/rad_sched.c && "
             "echo '#include \"libcommon/runtime/rad_engine.h\"' > %s/tools/a/ok.c && "
             "echo '#include \"libcommon/runtime/rad_engine_int.h\"' > %s/tools/a/state.c && "
             "echo '#include \"../../libcommon/runtime/rad_kvcache.h\"' > %s/tools/a/kv.c && "
             "sh scripts/check-walls.sh %s > %s/out; echo $? > %s/rc",
             d, d, d, d, d, d, d, d, d, d, d, d);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "grep -q '^1$' %s/rc && grep -q 'libcommon/runtime/rad_sched.c' %s/out && grep -q 'tools/a/state.c' %s/out && "
             "grep -q 'tools/a/kv.c' %s/out && ! grep -q 'rad_engine.c' %s/out && ! grep -q ok.c %s/out && "
             "[ $(wc -l < %s/out) -eq 3 ]", d, d, d, d, d, d, d);
    int rc = system(cmd);
    snprintf(cmd, sizeof cmd, "rm -rf %s", d);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(rc, 0, "check-walls did not report exactly the three breaches");
}

