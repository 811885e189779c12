package wire

import (
	"encoding/json"
	"time"
)

// The audit stream.
const (
	// AllEvents matches every audit event; the MRM_EVENTS stream holds them.
	AllEvents = "mrm.v1.events.>"
	// StreamEvents is the JetStream stream of audit events.
	StreamEvents = "MRM_EVENTS"
)

// EventSubject is the subject of an audit event of a component ("bank", "broker",
// "agent") and kind ("grant", "hold", "plan", …).
func EventSubject(component, kind string) string { return "mrm.v1.events." + component + "." + kind }

// Event is one entry of the audit stream (MRM_EVENTS, on
// EventSubject(Component, Op)): a request that moved money, as it was
// signed, who signed it, and what it did. Request is the signed request
// exactly as received, so anyone can check it later (signing.CheckRequest)
// without trusting the component that published the event; for an unsigned
// request (a market without identities) it has the subject and body only.
type Event struct {
	Versioned
	// ID identifies the event: the signer's key and the request's nonce
	// ("<key>.<nonce>"), which is also its JetStream dedupe id
	// (Nats-Msg-Id), so a retried publish is stored once.
	ID        string `json:"id"`
	Component string `json:"component"` // "bank", "broker"
	Op        string `json:"op"`        // the endpoint: "grant", "capture", "spend"
	// At is when the component served the request.
	At time.Time `json:"at"`
	// Principal is the registered signer (zero when the component knows no
	// identities).
	Principal Principal     `json:"principal"`
	Request   SignedRequest `json:"request"`
	// Result is the reply's result, as the requester received it.
	Result json.RawMessage `json:"result,omitempty"`
}

// EventID is the id of the event of a request signed by key with nonce.
func EventID(key, nonce string) string { return key + "." + nonce }
