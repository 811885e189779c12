package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Requests that move money carry an id (spend, spend --more/--less,
// cancel, submit, transfer, grant): the CLI makes one when --id is not
// given, shows it, and when the answer is "unavailable" (a time-out: the
// request may or may not have been applied) asks again with the same id —
// each try a new signature and nonce, the same request — so the request is
// applied once and its outcome is known.

// retryDelays are the pauses before the second and third tries (about 15 s
// in all).
var retryDelays = []time.Duration{4 * time.Second, 10 * time.Second}

// callRetry is call, retried with the same request while unavailable.
func callRetry[Rep any](c *ucli.Context, do func(ctx context.Context, cl clients) (Rep, error), human func(w io.Writer, rep Rep) error) error {
	return call(c, func(ctx context.Context, cl clients) (Rep, error) {
		for i := 0; ; i++ {
			rep, err := do(ctx, cl)
			if err == nil || !errors.Is(err, wire.ErrUnavailable) || i >= len(retryDelays) {
				return rep, err
			}
			fmt.Fprintf(c.App.ErrWriter, "mrmarket: %v; asking again with the same id\n", err)
			select {
			case <-time.After(retryDelays[i]):
			case <-ctx.Done():
				return rep, err
			}
		}
	}, human)
}

// maxPriceSlack is how much above the quoted price a deadline submit
// signs as its max price: prices move between the quote and the admission.
const maxPriceSlack = 1.1

// signMaxPrice gives a deadline submit without a budget a max price (the
// bank holds no more than the user signed): the price quoted for the
// deadline, plus a margin. A job without a deadline, or with a max price
// already, is left as is.
func signMaxPrice(ctx context.Context, cl clients, req *wire.SubmitRequest) error {
	if req.Deadline.IsZero() || req.Budget != 0 || req.MaxPrice != 0 {
		return nil
	}
	q, err := cl.broker.Quote(ctx, &wire.QuoteRequest{User: req.User, Job: req.Job, Points: 10})
	if err != nil {
		return err
	}
	if len(q.Curve) == 0 {
		return wire.Errorf(wire.ErrUnavailable, "no price quoted for job %q", req.Job.Name)
	}
	// Prices fall with the deadline: the last point at or before it costs
	// at least what the deadline does.
	price := q.Curve[0].Price
	for _, p := range q.Curve {
		if !p.Deadline.After(req.Deadline) {
			price = p.Price
		}
	}
	req.MaxPrice = min(money.Micro(float64(price)*maxPriceSlack)+1, money.Max)
	return nil
}
