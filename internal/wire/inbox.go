package wire

// InboxPrefix is the inbox prefix of the connection of the principal whose
// NKey public key is pub: its replies arrive under InboxPrefix(pub)+".…",
// and the NATS server lets only that principal subscribe there, so nobody
// reads another principal's replies.
func InboxPrefix(pub string) string { return "_INBOX." + pub }
