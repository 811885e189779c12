package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
)

// TestSavesAreGroupCommitted: bid changes saving at once, whose saves
// are group-committed, each return only once the file has their change:
// the file ends with every one.
func TestSavesAreGroupCommitted(t *testing.T) {
	a := &Agent{cfg: Config{Host: "h", StateFile: filepath.Join(t.TempDir(), "agent.json"), Now: time.Now},
		bids: map[bidKey]*bid{}, total: map[legKey]money.Micro{}, captured: map[legKey]money.Micro{}}
	a.saved = sync.NewCond(&a.saveMu)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			a.mu.Lock()
			a.total[legKey{"hold", fmt.Sprintf("vm-%02d", i)}] = money.Micro(i)
			a.mu.Unlock()
			if err := a.save(); err != nil {
				t.Error(err)
			}
			if data, err := os.ReadFile(a.cfg.StateFile); err != nil || !strings.Contains(string(data), fmt.Sprintf(`"vm-%02d"`, i)) {
				t.Errorf("save %d returned before the file had its change (%v)", i, err)
			}
		})
	}
	wg.Wait()
	data, err := os.ReadFile(a.cfg.StateFile)
	if err != nil {
		t.Fatal(err)
	}
	var s savedState
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Totals) != 64 || a.saveWant != 64 {
		t.Fatalf("the file has %d of 64 changes after %d saves", len(s.Totals), a.saveWant)
	}
}
