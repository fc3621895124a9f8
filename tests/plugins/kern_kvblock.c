/* kern_kvblock.c — kern_test's kernels as library 'kern_kvblock' with an attention variant
 * "decode" for one row that requires KV blocks of 32, before the generic one (blocks of 16):
 * selection picks "decode" for the decode bucket, so the group's block size is 32, and the
 * generic kernel picked for the wider buckets disagrees with it (refused at open, by name). */
#define KERN_TEST_NAME "kern_kvblock"
#define KERN_TEST_DESC "kern_test with a one-row attention variant on 32-token KV blocks"
#define KERN_TEST_ATTN_NARROW_VARIANT "decode"
#define KERN_TEST_ATTN_NARROW_NMAX 1
#define KERN_TEST_ATTN_NARROW_KVB 32
#include "kern_test.c"
