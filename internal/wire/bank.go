package wire

import (
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
)

// Subjects of the bank's accounts: grants, balances, transfers, income,
// statements and the ledger. Holds are in holds.go, principals in
// principals.go.
const (
	BankGrant     = "mrm.v1.bank.grant"
	BankBalance   = "mrm.v1.bank.balance"
	BankLedger    = "mrm.v1.bank.ledger"
	BankTransfer  = "mrm.v1.bank.transfer"
	BankIncome    = "mrm.v1.bank.income"
	BankStatement = "mrm.v1.bank.statement"

	// QueueBank is the queue group the bank's replicas share.
	QueueBank = "mrm-bank"
)

// GrantRequest mints Amount into User's account (creating it). ID makes the
// grant idempotent: a repeated ID applies once and replies as the first did.
type GrantRequest struct {
	Versioned
	ID     string      `json:"id"`
	User   string      `json:"user"`
	Amount money.Micro `json:"amount_micro"`
	Memo   string      `json:"memo,omitempty"`
}

func (r *GrantRequest) Validate() error {
	if err := checkMemo(r.Memo); err != nil {
		return err
	}
	if err := CheckID("grant id", r.ID); err != nil {
		return err
	}
	if err := CheckName("user", r.User); err != nil {
		return err
	}
	return checkAmount("grant amount", r.Amount)
}

// GrantReply answers a GrantRequest.
type GrantReply struct {
	Transfer string      `json:"transfer"`
	User     string      `json:"user"`
	Amount   money.Micro `json:"amount_micro"`
	Balance  money.Micro `json:"balance_micro"`
	Replayed bool        `json:"replayed,omitempty"`
}

// BalanceRequest asks for User's account.
type BalanceRequest struct {
	Versioned
	User string `json:"user"`
}

func (r *BalanceRequest) Validate() error { return CheckName("user", r.User) }

// BalanceReply is a user's account: spendable balance, money held in open
// holds, total granted and total spent (captured from the user's holds).
type BalanceReply struct {
	User    string      `json:"user"`
	Balance money.Micro `json:"balance_micro"`
	Held    money.Micro `json:"held_micro"`
	Granted money.Micro `json:"granted_micro"`
	Spent   money.Micro `json:"spent_micro"`
	Holds   []HoldInfo  `json:"holds"`
}

// LedgerRequest asks for the whole ledger and its invariant.
type LedgerRequest struct {
	Versioned
}

func (r *LedgerRequest) Validate() error { return nil }

// Account kinds.
const (
	AccountUser     = "user"
	AccountProvider = "provider"
	AccountEscrow   = "escrow"
	AccountMint     = "mint"
)

// Account is one ledger account.
type Account struct {
	ID      string      `json:"id"`
	Kind    string      `json:"kind"`
	Balance money.Micro `json:"balance_micro"`
}

// LedgerReply is the ledger and the check of its invariant:
// Σ balances (users, providers) + Σ open holds = Σ granted, no balance below
// zero. Violations lists what is wrong; empty means the invariant holds.
type LedgerReply struct {
	Accounts   []Account   `json:"accounts"`
	Granted    money.Micro `json:"granted_micro"`
	Balances   money.Micro `json:"balances_micro"`
	OpenHolds  money.Micro `json:"open_holds_micro"`
	Violations []string    `json:"violations"`
}

// TransferRequest moves Amount from user From to user To. ID makes it
// idempotent.
type TransferRequest struct {
	Versioned
	ID     string      `json:"id"`
	From   string      `json:"from"`
	To     string      `json:"to"`
	Amount money.Micro `json:"amount_micro"`
	Memo   string      `json:"memo,omitempty"`
}

func (r *TransferRequest) Validate() error {
	if err := CheckID("transfer id", r.ID); err != nil {
		return err
	}
	if err := CheckName("from user", r.From); err != nil {
		return err
	}
	if err := CheckName("to user", r.To); err != nil {
		return err
	}
	if r.From == r.To {
		return Errorf(ErrBadRequest, "a transfer from %q to itself", r.From)
	}
	if err := checkMemo(r.Memo); err != nil {
		return err
	}
	return checkAmount("transfer amount", r.Amount)
}

// TransferReply answers a TransferRequest with the payer's new balance.
type TransferReply struct {
	Transfer string      `json:"transfer"`
	Balance  money.Micro `json:"balance_micro"`
	Replayed bool        `json:"replayed,omitempty"`
}

// FairShareUser is the income schedule user meaning "every user": the
// amount is split evenly among all user accounts each period.
const FairShareUser = "*"

// IncomeSetRequest sets (or, with Amount 0, removes) the income schedule of
// User: Amount granted every Every, exactly once per period. User "*"
// splits Amount evenly among all users each period (fair share).
type IncomeSetRequest struct {
	Versioned
	User   string      `json:"user"`
	Amount money.Micro `json:"amount_micro"`
	Every  Duration    `json:"every"`
}

func (r *IncomeSetRequest) Validate() error {
	if r.User != FairShareUser {
		if err := CheckName("user", r.User); err != nil {
			return err
		}
	}
	if r.Amount == 0 {
		return nil
	}
	if err := checkAmount("income amount", r.Amount); err != nil {
		return err
	}
	if r.Every.D() < MinIncomePeriod || r.Every.D() > MaxDuration {
		return Errorf(ErrBadRequest, "income period must be between %s and %s, got %s", MinIncomePeriod, MaxDuration, r.Every.D())
	}
	return nil
}

// MinIncomePeriod bounds how often income is granted.
const MinIncomePeriod = time.Minute

// IncomeSchedule is one income schedule.
type IncomeSchedule struct {
	User       string      `json:"user"`
	Amount     money.Micro `json:"amount_micro"`
	Every      Duration    `json:"every"`
	Anchor     time.Time   `json:"anchor"`
	LastPeriod int64       `json:"last_period"`
}

// IncomeSetReply lists the schedules after the change.
type IncomeSetReply struct {
	Schedules []IncomeSchedule `json:"schedules"`
}

// StatementRequest asks for the transfers of one account: a user's (User)
// or any account by id (Account, e.g. "provider:host-1"), newest first.
type StatementRequest struct {
	Versioned
	User    string `json:"user,omitempty"`
	Account string `json:"account,omitempty"`
	Limit   int    `json:"limit,omitempty"`
}

func (r *StatementRequest) Validate() error {
	if (r.User == "") == (r.Account == "") {
		return Errorf(ErrBadRequest, "a statement needs exactly one of user or account")
	}
	if r.User != "" {
		if err := CheckName("user", r.User); err != nil {
			return err
		}
	} else if err := CheckID("account", r.Account); err != nil {
		return err
	}
	if r.Limit < 0 || r.Limit > MaxStatement {
		return Errorf(ErrBadRequest, "limit must be 0 (the default, %d) to %d", DefaultStatement, MaxStatement)
	}
	return nil
}

// MaxStatement bounds a statement's entries; DefaultStatement is how many
// a request without a limit gets.
const (
	MaxStatement     = 10_000
	DefaultStatement = 100
)

// StatementEntry is one transfer as seen from the account: Amount is
// positive for money in, negative for money out.
type StatementEntry struct {
	Transfer     string      `json:"transfer"`
	Kind         string      `json:"kind"`
	Counterparty string      `json:"counterparty"`
	Amount       money.Micro `json:"amount_micro"`
	At           time.Time   `json:"at"`
	Memo         string      `json:"memo,omitempty"`
}

// StatementReply is an account's balance and recent transfers.
type StatementReply struct {
	Account string           `json:"account"`
	Balance money.Micro      `json:"balance_micro"`
	Entries []StatementEntry `json:"entries"`
}
