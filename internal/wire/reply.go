package wire

import "encoding/json"

// envelope is the reply shape.
type envelope struct {
	V      int             `json:"v"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// EncodeReply encodes a result or an error as a reply envelope.
func EncodeReply(result any, err error) []byte {
	env := envelope{V: Version}
	if err != nil {
		env.Error = ToError(err)
	} else {
		raw, merr := json.Marshal(result)
		if merr != nil {
			env.Error = &Error{Code: CodeInternal, Message: "encoding reply: " + merr.Error()}
		} else {
			env.Result = raw
		}
	}
	b, _ := json.Marshal(env) // RawMessage and strings always marshal
	return b
}

// DecodeReply decodes a reply envelope into result, or returns its *Error.
func DecodeReply(data []byte, result any) error {
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return Errorf(ErrInternal, "malformed reply: %v", err)
	}
	if env.V != Version {
		return Errorf(ErrInternal, "reply version %d, this build speaks %d", env.V, Version)
	}
	if env.Error != nil {
		return env.Error
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(env.Result, result); err != nil {
		return Errorf(ErrInternal, "malformed reply result: %v", err)
	}
	return nil
}
