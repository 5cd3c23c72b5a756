package prometheus

import "syscall"

func errAddrInUse() error { return syscall.EADDRINUSE }
