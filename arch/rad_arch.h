/* <arch/rad_arch.h>: the spelling plugins include (spec); the ABI itself lives in abi/. */
#include "../abi/rad_arch.h"
