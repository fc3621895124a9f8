/* kern_loose.c — kern_test's kernels as library 'kern_loose', whose only add_rmsnorm states a
 * tolerance of 1e-2: looser than the default max tolerance (1e-3), so the selector must not
 * choose it, the fused op must not resolve, and the plugin must emit add + rmsnorm. */
#define KERN_TEST_NAME "kern_loose"
#define KERN_TEST_DESC "kern_test with a loose add_rmsnorm (tolerance 1e-2)"
#define KERN_TEST_FUSED_TOL 1e-2
#include "kern_test.c"
