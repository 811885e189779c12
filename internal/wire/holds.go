package wire

import "time"

// BankOpenHolds lists open holds (for a broker recovering plans it lost).
const BankOpenHolds = "mrm.v1.bank.holds"

// OpenHoldsRequest asks for the open holds whose memo starts with
// MemoPrefix, placed before Before (a hold being placed right now belongs
// to a plan being started).
type OpenHoldsRequest struct {
	Versioned
	MemoPrefix string    `json:"memo_prefix"`
	Before     time.Time `json:"before"`
}

func (r *OpenHoldsRequest) Validate() error {
	if len(r.MemoPrefix) > MaxMemo {
		return Errorf(ErrBadRequest, "memo prefix longer than %d bytes", MaxMemo)
	}
	return nil
}

// OpenHold is an open hold with the memo it was placed with.
type OpenHold struct {
	HoldInfo
	Memo    string    `json:"memo"`
	Created time.Time `json:"created"`
}

// MaxOpenHolds bounds an OpenHoldsReply.
const MaxOpenHolds = 10_000

// OpenHoldsReply answers an OpenHoldsRequest, oldest first, at most
// MaxOpenHolds.
type OpenHoldsReply struct {
	Holds []OpenHold `json:"holds"`
}
