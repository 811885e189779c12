package bank

import (
	"context"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Principals lists every registered principal, by key: the input of the
// NATS server's users (package natsauth).
func (b *Bank) Principals(ctx context.Context) ([]wire.Principal, error) {
	var out []wire.Principal
	err := b.st.run(ctx, func(t tx) error {
		out = out[:0]
		rows, err := t.query(ctx, `SELECT key, name, role FROM principals ORDER BY key`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var p wire.Principal
			if err := rows.Scan(&p.Key, &p.Name, &p.Role); err != nil {
				return err
			}
			out = append(out, p)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
