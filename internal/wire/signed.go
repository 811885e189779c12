package wire

import "time"

// The shapes of what travels signed. Package signing makes and checks
// their signatures; here they are plain data, so that any message can
// carry them and decoding needs no keys.

// Sealed is a body signed by Key for Purpose at Time (Unix nanoseconds).
// Body is kept as the exact bytes signed (base64 in JSON).
type Sealed struct {
	Purpose string `json:"purpose"`
	Key     string `json:"key"`
	Time    int64  `json:"time"`
	Body    []byte `json:"body"`
	Sig     string `json:"sig"`
}

// At is when the record was sealed.
func (s Sealed) At() time.Time { return time.Unix(0, s.Time) }

// SignedRequest is a signed request as it was sent: its subject, signing
// headers and exact body. It can travel inside other messages and be
// verified by anyone, any time later (signing.CheckRequest): a mandate.
type SignedRequest struct {
	Subject string `json:"subject"`
	Key     string `json:"key"`
	Time    string `json:"time"`
	Nonce   string `json:"nonce"`
	Sig     string `json:"sig"`
	Body    []byte `json:"body"`
}
