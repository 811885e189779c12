package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/daemon"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/stop"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Connecting. Every connection authenticates with a principal's NKey (the
// NATS server admits nobody else, and grants each role only its subjects)
// and verifies the server's TLS certificate with the market's CA.
//
// Which principal a command connects as: the admin for the admin commands
// (adminCommands); otherwise the user named by --user (MRM_USER) when its
// credentials are in --creds; otherwise the admin when admin.nk is there;
// otherwise the one user whose credentials are there. The CA is --tls-ca
// (MRM_TLS_CA), by default <creds>/../tls/ca.pem when it exists (where
// `mrmarket up --data DIR` writes it: DIR/creds and DIR/tls).

// adminCommands are the commands an admin signs (by their path below
// mrmarket): they connect as the admin even when they name a --user.
var adminCommands = map[string]bool{
	"bank grant":            true,
	"bank income set":       true,
	"bank principal add":    true,
	"bank principal list":   true,
	"bank principal revoke": true,
	"bank principal rotate": true,
}

func flagTLSCA() *ucli.StringFlag {
	return &ucli.StringFlag{Name: "tls-ca", Usage: "CA certificate (PEM) that verifies the NATS server (default: <creds>/../tls/ca.pem when it exists)", EnvVars: []string{"MRM_TLS_CA"}}
}

// commandPath is c's command below the app ("bank grant").
func commandPath(c *ucli.Context) string {
	var names []string
	for _, l := range c.Lineage() {
		if l.Command != nil && l.Command.Name != "" && l.Command.Name != c.App.Name {
			names = append([]string{l.Command.Name}, names...)
		}
	}
	return strings.Join(names, " ")
}

// credsDir is the credentials directory: --creds, or MRM_CREDS, or the
// config file's, or the default, for commands with or without the flag.
func credsDir(c *ucli.Context) signing.CredsDir { return signing.CredsDir(setting(c, "creds")) }

// tlsCA is --tls-ca (MRM_TLS_CA, the config file's), or the CA next to the
// credentials directory when it exists, or none (a server without TLS).
func tlsCA(c *ucli.Context, creds signing.CredsDir) string {
	if ca := setting(c, "tls-ca"); ca != "" {
		return ca
	}
	ca := filepath.Join(filepath.Dir(filepath.Clean(string(creds))), "tls", "ca.pem")
	if _, err := os.Stat(ca); err == nil {
		return ca
	}
	return ""
}

// connIdentity is the principal a command connects as (see above).
func connIdentity(c *ucli.Context, keys signing.CredsDir) (*signing.Signer, error) {
	s, _, err := connPrincipal(c, keys)
	return s, err
}

// connPrincipal is the principal a command connects as, with who it is
// (role and name) — the same principal signs the command's reads.
func connPrincipal(c *ucli.Context, keys signing.CredsDir) (*signing.Signer, rpc.As, error) {
	admin := rpc.As{Role: wire.RoleAdmin, Name: "admin"}
	if adminCommands[commandPath(c)] {
		s, err := keys.Signer(wire.RoleAdmin, "admin")
		if err != nil {
			err = setupError(keys, err)
		}
		return s, admin, err
	}
	user := setting(c, "user")
	var userErr error
	if user != "" {
		s, err := keys.Signer(wire.RoleUser, user)
		if err == nil {
			return s, rpc.As{Role: wire.RoleUser, Name: user}, nil
		}
		userErr = err
	}
	if s, err := keys.Signer(wire.RoleAdmin, "admin"); err == nil {
		return s, admin, nil
	}
	if userErr != nil {
		return nil, rpc.As{}, setupError(keys, userErr)
	}
	if ents, err := os.ReadDir(filepath.Join(string(keys), "users")); err == nil {
		var only string
		for _, e := range ents {
			if name, ok := strings.CutSuffix(e.Name(), ".nk"); ok && !e.IsDir() {
				if only != "" {
					only = ""
					break
				}
				only = name
			}
		}
		if only != "" {
			s, err := keys.Signer(wire.RoleUser, only)
			if err != nil {
				err = setupError(keys, err)
			}
			return s, rpc.As{Role: wire.RoleUser, Name: only}, err
		}
	}
	return nil, rpc.As{}, setupError(keys, errors.New("no credentials to connect with: pass --user (MRM_USER) with users/<name>.nk there, or the admin's admin.nk; "+
		"`mrmarket up --data DIR` writes them in DIR/creds"))
}

// localKeys are the credentials a command signs with: a key missing there
// is the local setup's mistake (setupError), not the market's refusal.
type localKeys struct{ signing.CredsDir }

func (k localKeys) Signer(role, name string) (*signing.Signer, error) {
	s, err := k.CredsDir.Signer(role, name)
	if errors.Is(err, wire.ErrForbidden) {
		err = setupError(k.CredsDir, err)
	}
	return s, err
}

// setupError is err (a key missing on this machine) said as what is
// wrong with the local setup: bad input (exit 2), not a refusal by the
// market, which was not asked.
func setupError(keys signing.CredsDir, err error) error {
	where := string(keys)
	if _, statErr := os.Stat(where); statErr != nil {
		where += ", which does not exist"
	}
	return badInput("%s (credentials directory %s: --creds, MRM_CREDS or creds in the config file name it)",
		strings.TrimPrefix(err.Error(), wire.ErrForbidden.Error()+": "), where)
}

// connect opens a client connection to the market named by --nats as the
// command's principal, failing fast (not retrying forever) when nothing is
// there.
func connect(c *ucli.Context) (*nats.Conn, error) {
	url := setting(c, "nats")
	keys := credsDir(c)
	signer, err := connIdentity(c, keys)
	if err != nil {
		return nil, err
	}
	ca, err := checkCA(c, keys)
	if err != nil {
		return nil, err
	}
	nc, err := natsutil.ConnectWith(url, natsutil.ConnectOptions{Name: "mrmarket-cli", Signer: signer, CAFile: ca, Timeout: 3 * time.Second})
	if err != nil {
		return nil, clientConnectError(url, ca, keys, err)
	}
	return nc, nil
}

// checkCA is the CA file a client verifies the server with (tlsCA), read
// before connecting: a file that is not there or holds no certificate is
// the local setup's mistake (exit 2), not an unreachable market.
func checkCA(c *ucli.Context, keys signing.CredsDir) (string, error) {
	ca := tlsCA(c, keys)
	if ca == "" {
		return "", nil
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return "", badInput("the CA certificate (--tls-ca, MRM_TLS_CA or tls-ca in the config file) cannot be read: %v", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return "", badInput("the CA certificate %s (--tls-ca, MRM_TLS_CA or tls-ca in the config file) holds no PEM certificate: "+
			"give the market's CA, <data>/tls/ca.pem of `mrmarket up --data DIR`", ca)
	}
	return ca, nil
}

// clientConnectError is connectError for a command: a server certificate
// the CA does not verify is the local setup's mistake — the wrong CA, or
// none — (exit 2): the market is there.
func clientConnectError(url, ca string, keys signing.CredsDir, err error) error {
	var verify *tls.CertificateVerificationError
	if !errors.As(err, &verify) {
		return connectError(url, err)
	}
	if ca == "" {
		return badInput("the NATS server at %s has a certificate no CA of this machine verifies (%v): give the market's CA with --tls-ca or MRM_TLS_CA "+
			"(none was found next to the credentials, %s)", url, verify.Err, filepath.Join(filepath.Dir(filepath.Clean(string(keys))), "tls", "ca.pem"))
	}
	return badInput("the NATS server at %s has a certificate the CA %s does not verify (%v): give the market's CA with --tls-ca or MRM_TLS_CA", url, ca, verify.Err)
}

// connectDaemon connects a daemon as signer, retrying forever once
// connected (natsutil's policy).
func connectDaemon(c *ucli.Context, name string, signer *signing.Signer, log *slog.Logger) (*nats.Conn, error) {
	url := setting(c, "nats")
	ca, err := checkCA(c, credsDir(c))
	if err != nil {
		return nil, err
	}
	nc, err := natsutil.ConnectWith(url, natsutil.ConnectOptions{Name: name, Signer: signer, CAFile: ca, Logger: log})
	if err != nil {
		return nil, connectError(url, err)
	}
	return nc, nil
}

// connectError says why a connection failed: refused credentials are
// forbidden (exit 3), anything else unavailable (exit 4).
func connectError(url string, err error) error {
	if errors.Is(err, nats.ErrAuthorization) || strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		return wire.Errorf(wire.ErrForbidden, "the NATS server at %s refused the credentials: %v (is the principal registered? `mrmarket bank principal add`)", url, err)
	}
	if errors.Is(err, nats.ErrTLS) || errors.Is(err, nats.ErrSecureConnRequired) || errors.Is(err, nats.ErrSecureConnWanted) {
		return wire.Errorf(wire.ErrUnavailable, "cannot reach the market at %s over TLS: %v (give its CA with --tls-ca or MRM_TLS_CA)", url, err)
	}
	return wire.Errorf(wire.ErrUnavailable, "cannot reach the market at %s: %v (start one with `mrmarket up`, or set MRM_NATS_URL)", url, err)
}

// bankConnSigner is the key `mrmarket bank serve` connects with: the
// bank's own (creds/bank.nk) when it is registered with role bank.
func bankConnSigner(ctx context.Context, b *bank.Bank, keys signing.CredsDir, admin *signing.Signer) *signing.Signer {
	if s, err := signing.LoadSigner(filepath.Join(string(keys), "bank.nk")); err == nil {
		if p, err := b.Whois(ctx, s.Public()); err == nil && p.Role == wire.RoleBank {
			return s
		}
	}
	// Until its own key is registered with role bank, the bank connects as
	// the admin.
	return admin
}

// daemonEnv is what a daemon command builds its daemon with: connections
// from the command's flags (connectDaemon), the anchor, metrics on reg and
// the process's logger, everything owned by s.
func daemonEnv(c *ucli.Context, s *stop.Stopper, anchor string, reg *prometheus.Registry) daemon.Env {
	log := daemonLogger(c)
	return daemon.Env{Stopper: s, AdminKey: anchor, Metrics: obs.NewMetrics(reg), Logger: log,
		Connect: func(name string, signer *signing.Signer) (*nats.Conn, error) {
			return connectDaemon(c, name, signer, log)
		}}
}

// serveHTTP serves /metrics of reg, /healthz of checks and /readyz of deps
// on addr until s stops.
func serveHTTP(s *stop.Stopper, addr string, reg *prometheus.Registry, checks map[string]obs.HealthFunc, deps []obs.Dependency) (*obs.Server, error) {
	srv, err := obs.Serve(addr, reg, checks)
	if err != nil {
		return nil, err
	}
	srv.Ready(deps...)
	s.AddCloser(func() { _ = srv.Close() })
	return srv, nil
}
