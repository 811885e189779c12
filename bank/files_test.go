package bank_test

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStoreFilesArePrivate: the SQLite store's files are its owner's
// alone: created 0600, and a looser file from before tightened at open.
func TestStoreFilesArePrivate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bank.db")
	b, _ := openBank(t, "sqlite:"+path)
	grant(t, b, "g", "alice", 5) // the WAL is written
	checkModes(t, path)
	b.Close()

	loose := filepath.Join(dir, "loose.db")
	for _, name := range []string{loose, loose + "-wal"} {
		if err := os.WriteFile(name, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(name, 0o644); err != nil { // whatever the umask
			t.Fatal(err)
		}
	}
	b, _ = openBank(t, "sqlite:"+loose)
	grant(t, b, "g", "alice", 5)
	checkModes(t, loose)
}

func checkModes(t *testing.T, path string) {
	t.Helper()
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %s, want -rw-------", filepath.Base(name), st.Mode().Perm())
		}
	}
}
