package market

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrDirInUse means another market runs on the data directory.
var ErrDirInUse = errors.New("market: the data directory is in use")

// lockDir takes the data directory for this process: an exclusive flock on
// dir/lock, which holds the holder's pid for the message. The kernel drops
// the lock when its process dies, so a stale file from a crash never
// blocks. Two markets on one directory would share one SQLite bank, one
// JetStream store and the agents' state files.
func lockDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("market: data directory lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is in use by another mrmarket (pid %s); stop it or use another --data", ErrDirInUse, dir, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("market: data directory lock: %w", err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
