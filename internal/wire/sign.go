package wire

import "github.com/nats-io/nkeys"

// CheckPublicKey validates an NKey user public key ("U…").
func CheckPublicKey(k string) error {
	if !nkeys.IsValidPublicUserKey(k) {
		return Errorf(ErrBadRequest, "invalid NKey public user key %q", k)
	}
	return nil
}

// HeaderOrder names what a request must stay in order with: a service
// runs one principal's requests to an endpoint that carry the same order
// key one at a time in the order sent, and those with different keys side
// by side. Unsigned on purpose: it only orders the sender's own requests.
const HeaderOrder = "Mrm-Order"
