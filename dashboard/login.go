package dashboard

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// LoginSubject is what a sign-in token is signed over: a signing domain of
// its own, which no service answers, so a token is no request to the market
// and no request to the market is a token.
const LoginSubject = "mrm.v1.dashboard.login"

// LoginTTL is how long after signing a token signs a browser in.
const LoginTTL = 10 * time.Minute

// ErrLogin is why a sign-in link was refused.
var ErrLogin = errors.New("sign-in refused")

// loginBody is what a token says: who signs in.
type loginBody struct {
	Role string `json:"role"`
	Name string `json:"name"`
}

// LoginToken is a one-time sign-in token for who, signed with its key: what
// `mrmarket dashboard login` prints inside a link. It carries no secret: a
// signature that only who's key makes, over who, a time and a nonce.
func LoginToken(s *signing.Signer, who rpc.As) (string, error) {
	if err := checkPrincipal(who); err != nil {
		return "", err
	}
	body, err := json.Marshal(loginBody{Role: who.Role, Name: who.Name})
	if err != nil {
		return "", err
	}
	m, err := s.Sign(LoginSubject, body)
	if err != nil {
		return "", err
	}
	req, _ := signing.SignedRequestOf(m.Subject, m.Header, m.Data)
	raw, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(raw), nil
}

// LoginLink is the link that signs a browser in with token at the
// dashboard whose address is base (http://127.0.0.1:9464).
func LoginLink(base, token string) string {
	return strings.TrimRight(base, "/") + "/login?t=" + url.QueryEscape(token)
}

// checkPrincipal: only the admin and users sign in; the services' keys
// (broker, bank, agents) are never a browser's.
func checkPrincipal(who rpc.As) error {
	switch who.Role {
	case wire.RoleAdmin:
		if who.Name != wire.RoleAdmin {
			return fmt.Errorf("%w: the admin is named admin, not %q", ErrLogin, who.Name)
		}
		return nil
	case wire.RoleUser:
		return wire.CheckName("user", who.Name)
	}
	return fmt.Errorf("%w: role %q does not sign in to the dashboard (admin or user)", ErrLogin, who.Role)
}

// logins checks tokens: each signs in once.
type logins struct {
	mu   sync.Mutex
	used map[string]time.Time // key/nonce → when it may be forgotten
}

// check returns whom token signs in at now, given the keys the dashboard
// holds: the token must be signed, within LoginTTL, by the key the
// dashboard holds for the principal it names, and not used before.
func (l *logins) check(token string, keys signing.Keyring, now time.Time) (rpc.As, error) {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) > 4096 {
		return rpc.As{}, fmt.Errorf("%w: the link is not a sign-in token", ErrLogin)
	}
	var req wire.SignedRequest
	if err := json.Unmarshal(raw, &req); err != nil || req.Subject != LoginSubject {
		return rpc.As{}, fmt.Errorf("%w: the link is not a sign-in token", ErrLogin)
	}
	caller, err := signing.CheckRequest(req)
	if err != nil {
		return rpc.As{}, fmt.Errorf("%w: %v", ErrLogin, err)
	}
	if age := now.Sub(caller.Time); age > LoginTTL || age < -signing.MaxSkew {
		return rpc.As{}, fmt.Errorf("%w: the link was made %s ago; a link signs in within %s (make another: mrmarket dashboard login)",
			ErrLogin, age.Round(time.Second), LoginTTL)
	}
	var body loginBody
	dec := json.NewDecoder(bytes.NewReader(req.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return rpc.As{}, fmt.Errorf("%w: %v", ErrLogin, err)
	}
	who := rpc.As{Role: body.Role, Name: body.Name}
	if err := checkPrincipal(who); err != nil {
		return rpc.As{}, err
	}
	held, err := keys.Signer(who.Role, who.Name)
	if err != nil {
		return rpc.As{}, fmt.Errorf("%w: this dashboard holds no key of %s %s, so it cannot act as them", ErrLogin, who.Role, who.Name)
	}
	if held.Public() != caller.Key {
		return rpc.As{}, fmt.Errorf("%w: the link is signed by a key other than the one this dashboard holds for %s", ErrLogin, who.Name)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, until := range l.used {
		if now.After(until) {
			delete(l.used, k)
		}
	}
	id := caller.Key + "/" + caller.Nonce
	if _, seen := l.used[id]; seen {
		return rpc.As{}, fmt.Errorf("%w: the link was used already; each signs in once (make another: mrmarket dashboard login)", ErrLogin)
	}
	if l.used == nil {
		l.used = map[string]time.Time{}
	}
	l.used[id] = caller.Time.Add(LoginTTL + signing.MaxSkew)
	return who, nil
}
