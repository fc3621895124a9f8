/* A shared object that dlopens but exports nothing Radiance looks for (no rad_plugin_info):
 * every symbol is hidden. The loader skips it by name. */
int kern_bad_noexport_unused(void);
int kern_bad_noexport_unused(void) { return 0; }
