// Package patroni holds the production Patroni configuration
// (patroni.yml), embedded so that the fault test runs the very file an
// operator deploys, with only its addresses and directories replaced.
package patroni

import _ "embed"

// Config is patroni.yml.
//
//go:embed patroni.yml
var Config []byte
