package natsauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLSFiles are the PEM files of a market's NATS TLS, in <data>/tls/.
type TLSFiles struct {
	// CA is the market's CA certificate: clients verify the server with it.
	CA string
	// Cert and Key are the server's certificate (signed by the CA) and
	// private key (mode 0600).
	Cert, Key string
}

// TLSDir are the files of dir.
func TLSDir(dir string) TLSFiles {
	return TLSFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem")}
}

// certLife is how long EnsureTLS's certificates are valid.
const certLife = 10 * 365 * 24 * time.Hour

// EnsureTLS makes sure dir holds a CA and a server certificate for the
// market's NATS (ECDSA P-256; the server's names: 127.0.0.1, ::1,
// localhost, this machine's hostname, and extra), creating what is
// missing and reusing what exists, so clients that trust the CA keep
// trusting a restarted market (delete dir to issue new names).
func EnsureTLS(dir string, extra ...string) (TLSFiles, error) {
	f := TLSDir(dir)
	if exists(f.CA) && exists(f.Cert) && exists(f.Key) {
		return f, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, fmt.Errorf("natsauth: TLS directory: %w", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "mrmarket NATS CA", Organization: []string{"mrmarket"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certLife),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return f, fmt.Errorf("natsauth: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return f, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "mrmarket NATS server", Organization: []string{"mrmarket"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// Client auth too: a cluster node presents it on the routes it
		// dials, and routes verify both ways (nats-server forces it).
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		DNSNames:    []string{"localhost"},
	}
	names := extra
	if h, err := os.Hostname(); err == nil && h != "" {
		names = append(names, h)
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			if !ip.IsUnspecified() && !ip.IsLoopback() { // 0.0.0.0 names nothing; loopbacks are in
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
		} else if n != "" && n != "localhost" {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return f, fmt.Errorf("natsauth: server certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return f, err
	}
	// The key first: a half-written set is redone whole next time.
	if err := writePEM(f.Key, "EC PRIVATE KEY", keyDER, 0o600); err != nil {
		return f, err
	}
	if err := writePEM(f.Cert, "CERTIFICATE", der, 0o644); err != nil {
		return f, err
	}
	if err := writePEM(f.CA, "CERTIFICATE", caDER, 0o644); err != nil {
		return f, err
	}
	return f, nil
}

// ErrRouteCert: the server certificate cannot authenticate cluster routes.
var ErrRouteCert = errors.New("natsauth: the server certificate is not valid for cluster routes")

// CheckRouteCert checks that f's server certificate may also authenticate
// as a client (extended key usage clientAuth), which cluster routes need:
// EnsureTLS has issued such certificates since clustering; an older one is
// refused here with what to do, not by a route failing its handshake.
func CheckRouteCert(f TLSFiles) error {
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return fmt.Errorf("natsauth: server certificate %s: %w", f.Cert, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("natsauth: server certificate %s: %w", f.Cert, err)
	}
	for _, u := range cert.ExtKeyUsage {
		if u == x509.ExtKeyUsageClientAuth || u == x509.ExtKeyUsageAny {
			return nil
		}
	}
	return fmt.Errorf("%w: %s has no clientAuth usage (issued before clustering). Move its directory away to have a new "+
		"CA and certificate issued (clients then need the new ca.pem), or install a certificate with serverAuth and clientAuth", ErrRouteCert, f.Cert)
}

// ServerConfig is the server's TLS configuration of f (TLS 1.2 or later;
// no client certificates: clients authenticate with their NKeys).
func ServerConfig(f TLSFiles) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("natsauth: server certificate %s: %w", f.Cert, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return fmt.Errorf("natsauth: writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("natsauth: writing %s: %w", path, err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist) && err == nil
}
