// Package tlsurl reads the TLS query parameters that every networked URL scheme of
// dlock takes (redis, rediss, redis+setnx, redlock, mysql, mysql+getlock, zk, etcd),
// so that they are spelled, defaulted and checked the same way everywhere:
//
//	tls=true|false|skip-verify   TLS on, off, or on without verifying the server
//	tls_ca=FILE                  PEM CA certificates to trust instead of the system's
//	tls_cert=FILE, tls_key=FILE  a client certificate and its key (PEM), both or neither
//	tls_server_name=NAME         the name the server's certificate must carry
//
// Any tls_* parameter turns TLS on. Without tls_ca the system's roots are trusted;
// without tls_server_name each host is verified under the name it is dialled by.
// skip-verify must be spelled out: nothing else turns verification off, and it
// refuses tls_ca and tls_server_name, which it would ignore.
package tlsurl

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/dlock-go/dlock"
)

// The TLS query parameters.
const (
	ParamTLS        = "tls"
	ParamCA         = "tls_ca"
	ParamCert       = "tls_cert"
	ParamKey        = "tls_key"
	ParamServerName = "tls_server_name"
)

// Params lists the TLS query parameters, for dlock.ParseQuery's known list.
var Params = []string{ParamTLS, ParamCA, ParamCert, ParamKey, ParamServerName}

// With returns known followed by Params.
func With(known ...string) []string { return append(slices.Clip(known), Params...) }

// Config returns the TLS configuration that q's TLS parameters ask for, or nil when
// they ask for none. implied is true for a scheme that means TLS by itself
// (rediss://). Files are read now. Errors wrap dlock.ErrInvalidURL and name the
// parameter and the file, never a file's content.
func Config(q map[string]string, implied bool) (*tls.Config, error) {
	mode, set := q[ParamTLS]
	extra := ""
	for _, p := range Params[1:] {
		if _, ok := q[p]; ok {
			extra = p
			break
		}
	}
	if !set {
		mode = "false"
		if implied || extra != "" {
			mode = "true"
		}
	}
	switch mode {
	case "false":
		switch {
		case implied:
			return nil, fmt.Errorf("%w: tls=false: the scheme itself asks for TLS", dlock.ErrInvalidURL)
		case extra != "":
			return nil, fmt.Errorf("%w: %s needs TLS, and tls=false turns it off", dlock.ErrInvalidURL, extra)
		}
		return nil, nil
	case "true", "skip-verify":
	default:
		return nil, fmt.Errorf("%w: tls=%q: want true, false or skip-verify", dlock.ErrInvalidURL, mode)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if mode == "skip-verify" {
		for _, p := range []string{ParamCA, ParamServerName} {
			if _, ok := q[p]; ok {
				return nil, fmt.Errorf("%w: tls=skip-verify verifies nothing, so %s would be ignored: drop one of them", dlock.ErrInvalidURL, p)
			}
		}
		c.InsecureSkipVerify = true
	}
	if f, ok := q[ParamCA]; ok {
		pem, err := readFile(ParamCA, f)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: %s=%q: no PEM certificate in the file", dlock.ErrInvalidURL, ParamCA, f)
		}
		c.RootCAs = pool
	}
	certFile, hasCert := q[ParamCert]
	keyFile, hasKey := q[ParamKey]
	switch {
	case hasCert != hasKey:
		return nil, fmt.Errorf("%w: %s and %s go together (a client certificate and its key)", dlock.ErrInvalidURL, ParamCert, ParamKey)
	case hasCert:
		certPEM, err := readFile(ParamCert, certFile)
		if err != nil {
			return nil, err
		}
		keyPEM, err := readFile(ParamKey, keyFile)
		if err != nil {
			return nil, err
		}
		// The error of X509KeyPair describes the PEM blocks, not their bytes.
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("%w: %s=%q, %s=%q: %v", dlock.ErrInvalidURL, ParamCert, certFile, ParamKey, keyFile, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	if n, ok := q[ParamServerName]; ok {
		if n == "" {
			return nil, fmt.Errorf("%w: %s is empty", dlock.ErrInvalidURL, ParamServerName)
		}
		c.ServerName = n
	}
	return c, nil
}

// MaxFile is the largest file a TLS parameter may name: PEM certificates and keys
// are a few KiB (a bundle of every public CA is about 200 KiB).
const MaxFile = 1 << 20

// readFile reads the file a TLS parameter names: a regular file of at most
// MaxFile bytes (not a device or a pipe, whose read might never end).
func readFile(param, name string) ([]byte, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: %s is empty: want a file name", dlock.ErrInvalidURL, param)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", dlock.ErrInvalidURL, param, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s=%q is not a regular file", dlock.ErrInvalidURL, param, name)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFile+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %s: %w", dlock.ErrInvalidURL, param, err)
	case len(b) > MaxFile:
		return nil, fmt.Errorf("%w: %s=%q is larger than %d bytes: not a PEM file", dlock.ErrInvalidURL, param, name, MaxFile)
	}
	return b, nil
}
