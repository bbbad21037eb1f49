package tlsurl

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/urlfuzz"
)

// pemFiles writes a self-signed certificate and its key into dir and returns their
// files.
func pemFiles(t testing.TB, dir string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tlsurl test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for f, b := range map[string]*pem.Block{cert: {Type: "CERTIFICATE", Bytes: der}, key: {Type: "PRIVATE KEY", Bytes: kder}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return cert, key
}

// TestFilesBounded: a TLS parameter naming a device, a directory or a file larger
// than MaxFile is ErrInvalidURL at once: reading /dev/zero never ended (and grew
// the heap without bound).
func TestFilesBounded(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.pem")
	if err := os.WriteFile(big, make([]byte, MaxFile+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"/dev/zero", "/dev/null", t.TempDir(), big} {
		done := make(chan error, 1)
		go func() {
			_, err := Config(map[string]string{ParamCA: f}, false)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, dlock.ErrInvalidURL) {
				t.Errorf("tls_ca=%s: %v, want ErrInvalidURL", f, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("tls_ca=%s: still reading after 5s", f)
		}
	}
}

// FuzzConfig: Config on any query (with $CA, $CERT and $KEY standing for a real
// certificate and key): no panic; errors wrap ErrInvalidURL; a configuration
// verifies the server unless tls=skip-verify says otherwise, asks for TLS 1.2 at
// least, names the server tls_server_name names, and exists whenever TLS was asked
// for (by a scheme that implies it, tls=true or any tls_* parameter).
func FuzzConfig(f *testing.F) {
	for _, s := range []string{"", "tls=true", "tls=false", "tls=skip-verify", "tls=skip-verify&tls_ca=$CA", "tls=TRUE",
		"tls_ca=$CA&tls_cert=$CERT&tls_key=$KEY&tls_server_name=x", "tls_cert=$CERT", "tls_key=$KEY&tls_cert=$KEY",
		"tls=false&tls_server_name=x", "tls_server_name=", "tls_ca=", "tls_ca=$KEY", "tls_ca=/dev/zero", "tls_ca=%2Fetc",
		"tls_cert=$CERT&tls_key=$CA", "tls=skip-verify&tls_cert=$CERT&tls_key=$KEY"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	cert, key := pemFiles(f, f.TempDir())
	f.Fuzz(func(t *testing.T, raw string, implied bool) {
		raw = strings.NewReplacer("$CA", url.QueryEscape(cert), "$CERT", url.QueryEscape(cert), "$KEY", url.QueryEscape(key)).Replace(raw)
		q, err := dlock.ParseQuery(&url.URL{Scheme: "x", RawQuery: raw}, Params...)
		if err != nil {
			return
		}
		c, err := Config(q, implied)
		urlfuzz.CheckErr(t, raw, err)
		if err != nil {
			return
		}
		asked := implied || q[ParamTLS] == "true" || q[ParamTLS] == "skip-verify"
		for _, p := range Params[1:] {
			_, given := q[p]
			asked = asked || given
		}
		switch {
		case c == nil && asked:
			t.Fatalf("Config(%v, %v) is nil: TLS was asked for", q, implied)
		case c == nil:
			return
		case c.MinVersion < tls.VersionTLS12:
			t.Fatalf("MinVersion %x", c.MinVersion)
		case c.InsecureSkipVerify != (q[ParamTLS] == "skip-verify"):
			t.Fatalf("InsecureSkipVerify %v for tls=%q", c.InsecureSkipVerify, q[ParamTLS])
		case c.ServerName != q[ParamServerName]:
			t.Fatalf("ServerName %q, want %q", c.ServerName, q[ParamServerName])
		case (len(c.Certificates) == 1) != (q[ParamCert] != ""):
			t.Fatalf("%d client certificates for tls_cert=%q", len(c.Certificates), q[ParamCert])
		}
	})
}
