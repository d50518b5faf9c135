# Sourced, not run, by scripts that turn the kernel's FUSE over io_uring switch
# (Linux 6.14+) on or off for a while and must put it back:
#   fuse_uring_present      true when this kernel has the switch
#   fuse_uring_set Y|N      remembers the value it had before the first set, then sets it
#   fuse_uring_restore      puts the remembered value back (for EXIT traps; idempotent)
# The switch is global: scripts that set it must not run beside each other.
FUSE_URING_SWITCH=/sys/module/fuse/parameters/enable_uring
FUSE_URING_WAS=""
fuse_uring_present() { [ -f "$FUSE_URING_SWITCH" ]; }
fuse_uring_set() {
  [ -n "$FUSE_URING_WAS" ] || FUSE_URING_WAS=$(cat "$FUSE_URING_SWITCH")
  echo "$1" >"$FUSE_URING_SWITCH"
}
fuse_uring_restore() {
  [ -z "$FUSE_URING_WAS" ] || echo "$FUSE_URING_WAS" >"$FUSE_URING_SWITCH"
  FUSE_URING_WAS=""
}
