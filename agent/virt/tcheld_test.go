package virt_test

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent/virt"
	"github.com/mrmarket/mrmarket/internal/testpoll"
)

// TestHeldCountsRiseUnderPressure: the network throttle reads whether a
// VM asked for more than its cap from its shaping's counters (HeldCounts),
// since a TCP flow held at a small cap moves too little to tell. On a real
// kernel link shaped as a tap is (HTB root, one class at the cap), a TCP
// flow that wants far more than its 64 KiB/s cap raises the count.
// Mutation: reading a counter HTB does not raise when it holds packets
// (requeues), or only the class's drops (none: TCP backs off first),
// leaves the count flat.
func TestHeldCountsRiseUnderPressure(t *testing.T) {
	link := startNetLink(t, 8)
	if err := virt.ShapeDev(link.hostEnd, 64<<10); err != nil {
		t.Fatal(err)
	}
	before, err := virt.HeldCounts()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := before[link.hostEnd]; !ok {
		t.Fatalf("the shaped device %s is not among the counts %v", link.hostEnd, before)
	}
	ln, err := link.listen(5301)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	conn, err := net.Dial("tcp", net.JoinHostPort(link.peerIP, "5301"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := conn.Write(buf); err != nil {
				return
			}
		}
	}()
	testpoll.CheckFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		after, err := virt.HeldCounts()
		if err != nil {
			return err
		}
		if after[link.hostEnd] <= before[link.hostEnd] {
			return fmt.Errorf("a flow held at 64 KiB/s: the held count of %s stayed at %.0f", link.hostEnd, after[link.hostEnd])
		}
		return nil
	})
}
