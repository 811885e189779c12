package wire

import "crypto/ed25519"

// InboxPrefix is the inbox prefix of the connection of the principal whose
// NKey public key is pub: its replies arrive under InboxPrefix(pub)+".…",
// and the NATS server lets only that principal subscribe there, so nobody
// reads another principal's replies.
func InboxPrefix(pub string) string { return "_INBOX." + pub }

// SignNonce signs the nonce a NATS server sends when a connection
// authenticates with s's NKey (nats.Nkey's signature callback): the
// connection proves it holds the principal's key, as every request it
// signs does.
func (s *Signer) SignNonce(nonce []byte) ([]byte, error) {
	return ed25519.Sign(s.priv, nonce), nil
}
