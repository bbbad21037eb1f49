package servers

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// respDo sends one Redis command on a fresh connection and returns the reply
// rendered as text: simple strings and bulk strings as is, integers in decimal,
// arrays as their elements joined by "\n", nil as "". A Redis error reply is
// returned as an error. It is the package's own control channel (readiness,
// REPLICAOF, INFO, CLUSTER INFO), independent of any client library.
func respDo(ctx context.Context, addr string, args ...string) (string, error) {
	return respDoAs(ctx, respClient{}, addr, args...)
}

// respClient is how the control channel reaches a server: over TLS (tls not nil),
// and authenticated with AUTH password (password not empty).
type respClient struct {
	tls      *tls.Config
	password string
}

// respDoAs is respDo as client c.
func respDoAs(ctx context.Context, c respClient, addr string, args ...string) (string, error) {
	var d net.Dialer
	var conn net.Conn
	var err error
	if c.tls != nil {
		td := tls.Dialer{NetDialer: &d, Config: c.tls}
		conn, err = td.DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var b strings.Builder
	write := func(args ...string) {
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if c.password != "" {
		write("AUTH", c.password)
	}
	write(args...)
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	if c.password != "" {
		if _, err := readRESP(r); err != nil {
			return "", fmt.Errorf("AUTH: %w", err)
		}
	}
	return readRESP(r)
}

func readRESP(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("resp: empty line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", &redisError{msg: line[1:]}
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := readFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		parts := make([]string, 0, max(n, 0))
		for i := 0; i < n; i++ {
			s, err := readRESP(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, "\n"), nil
	default:
		return "", fmt.Errorf("resp: unexpected reply %q", line)
	}
}

func readFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

type redisError struct{ msg string }

func (e *redisError) Error() string { return "redis: " + e.msg }

// infoField extracts "field:value" from an INFO reply.
func infoField(info, field string) string {
	for _, l := range strings.Split(info, "\n") {
		l = strings.TrimRight(l, "\r")
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return v
		}
	}
	return ""
}
