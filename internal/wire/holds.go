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

// BankHolds reads holds by id (the broker, for the figures of the plans it
// answers about: what the bank captured, released and still holds).
const BankHolds = "mrm.v1.bank.holds.get"

// MaxHoldsRead bounds a HoldsRequest.
const MaxHoldsRead = 10_000

// HoldsRequest asks for the holds IDs.
type HoldsRequest struct {
	Versioned
	IDs []string `json:"ids"`
}

func (r *HoldsRequest) Validate() error {
	if len(r.IDs) == 0 || len(r.IDs) > MaxHoldsRead {
		return Errorf(ErrBadRequest, "ask for 1 to %d holds, got %d", MaxHoldsRead, len(r.IDs))
	}
	for _, id := range r.IDs {
		if err := CheckID("hold id", id); err != nil {
			return err
		}
	}
	return nil
}

// HoldsReply has the holds of a HoldsRequest the bank knows, in its order;
// unknown ids are left out.
type HoldsReply struct {
	Holds []HoldInfo `json:"holds"`
}
