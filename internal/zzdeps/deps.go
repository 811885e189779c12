package zzdeps

import (
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/nats-io/nkeys"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/urfave/cli/v2"
	_ "modernc.org/sqlite"
	_ "gonum.org/v1/gonum/mat"
	_ "libvirt.org/go/libvirt"
)
