package natsauth_test

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/mrmarket/mrmarket/internal/natsauth"
)

// TestEnsureTLS: a CA and a server certificate for the loopbacks, the
// host name and the extra names, the key readable by its owner only, and
// the same files again on a second call (a restart).
func TestEnsureTLS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	f, err := natsauth.EnsureTLS(dir, "nats-1.example", "10.0.0.7", "0.0.0.0")
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(f.Key)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key %s: %v %v", f.Key, st.Mode(), err)
	}
	read := func(p string) *x509.Certificate {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca, cert := read(f.CA), read(f.Cert)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, name := range []string{"127.0.0.1", "::1", "localhost", "nats-1.example", "10.0.0.7"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "0.0.0.0"}); err == nil {
		t.Error("the certificate names 0.0.0.0")
	}
	if _, err := natsauth.ServerConfig(f); err != nil {
		t.Fatal(err)
	}
	again, err := natsauth.EnsureTLS(dir)
	if err != nil || again != f || !read(again.CA).Equal(ca) {
		t.Fatalf("a second call made new files: %v %v", again, err)
	}
}
