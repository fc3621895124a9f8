/* rad-kbench — not yet implemented; see the issue that brings it. Exits 2 so no script mistakes
 * this placeholder for the real tool. */
#include <stdio.h>

int main(void) {
    fprintf(stderr, "rad-kbench: not implemented yet in this build\n");
    return 2;
}
