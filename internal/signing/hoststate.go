package signing

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// HostStatePurpose is the seal purpose of host's state.
func HostStatePurpose(host string) string { return "host-state/" + host }

// SealHostState seals st (its JSON) for its host with the agent's signer.
func SealHostState(agent *Signer, st wire.HostState) (wire.Sealed, error) {
	body, err := json.Marshal(st)
	if err != nil {
		return wire.Sealed{}, err
	}
	return agent.Seal(HostStatePurpose(st.Host), body), nil
}

// Errors of host states; all are forbidden.
var (
	ErrStateSigner = fmt.Errorf("%w: host state not signed by its host's agent", wire.ErrForbidden)
	ErrStateTime   = fmt.Errorf("%w: host state sealed outside the allowed time", wire.ErrForbidden)
)

// HostStateMsg is a host state as published: sealed (Sealed set) or, from
// an agent without identity, plain (State only).
type HostStateMsg struct {
	Sealed *wire.Sealed
	State  wire.HostState
}

// DecodeHostState decodes a published host state, sealed or plain. A
// sealed one's body is decoded (strictly) but not yet verified: see
// OpenHostState.
func DecodeHostState(data []byte) (HostStateMsg, error) {
	var probe struct {
		Purpose string `json:"purpose"`
		Sig     string `json:"sig"`
	}
	if json.Unmarshal(data, &probe) == nil && probe.Sig != "" && strings.HasPrefix(probe.Purpose, "host-state/") {
		var s wire.Sealed
		if err := json.Unmarshal(data, &s); err != nil {
			return HostStateMsg{}, wire.Errorf(wire.ErrBadRequest, "malformed sealed state: %v", err)
		}
		var st wire.HostState
		if err := wire.Decode(s.Body, &st); err != nil {
			return HostStateMsg{}, err
		}
		return HostStateMsg{Sealed: &s, State: st}, nil
	}
	var st wire.HostState
	if err := wire.Decode(data, &st); err != nil {
		return HostStateMsg{}, err
	}
	return HostStateMsg{State: st}, nil
}

// OpenHostState checks m as a state of its host: sealed for that host,
// sealed no later than now+MaxSkew and, when maxAge > 0, no earlier than
// now-maxAge. It returns the signer's key; the caller checks that the key
// is the host's agent.
func OpenHostState(m HostStateMsg, now time.Time, maxAge time.Duration) (string, error) {
	if m.Sealed == nil {
		return "", fmt.Errorf("%w: unsealed state of %s", ErrStateSigner, m.State.Host)
	}
	key, err := Open(*m.Sealed, HostStatePurpose(m.State.Host))
	if err != nil {
		return "", err
	}
	at := m.Sealed.At()
	if at.After(now.Add(MaxSkew)) {
		return "", fmt.Errorf("%w: sealed at %s, in the future", ErrStateTime, at.UTC().Format(time.RFC3339))
	}
	if maxAge > 0 && now.Sub(at) > maxAge {
		return "", fmt.Errorf("%w: sealed at %s, older than %s", ErrStateTime, at.UTC().Format(time.RFC3339), maxAge)
	}
	return key, nil
}
