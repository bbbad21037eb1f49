package servers

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// PKI is a throw-away certificate authority for servers started with TLS: a CA, a
// server certificate valid for 127.0.0.1, ::1 and localhost (or the hosts given to
// NewPKIFor), and a client
// certificate, as PEM files in a directory (ECDSA P-256 keys in PKCS#8, which
// redis-server, MariaDB, ZooKeeper's PEM key store and Go all read). Nothing of it
// is trusted by the system.
type PKI struct {
	Dir string
	// CAFile holds the CA certificate: what clients and servers trust.
	CAFile string
	// ServerCert and ServerKey are the server's certificate and key; ServerKeyStore
	// holds both in one file (ZooKeeper's PEM key store).
	ServerCert, ServerKey, ServerKeyStore string
	// ClientCert and ClientKey are a client certificate (CN ClientName) and its key.
	ClientCert, ClientKey string

	pool       *x509.CertPool
	client     tls.Certificate
	serverName string // what ClientTLS verifies the server as ("": the address dialled)
}

// ClientName is the common name of a PKI's client certificate.
const ClientName = "dlock-test-client"

// NewPKI generates a CA and its certificates into a new temporary directory; Close
// removes it.
func NewPKI() (*PKI, error) { return NewPKIFor() }

// NewPKIFor is NewPKI with a server certificate valid for exactly hosts (DNS names
// and IP addresses) instead of 127.0.0.1, ::1 and localhost: NewPKIFor("localhost")
// makes a certificate that a client verifying the server by its IP address refuses.
// ClientTLS then verifies the server as hosts[0].
func NewPKIFor(hosts ...string) (*PKI, error) {
	dir, err := tempDir("pki")
	if err != nil {
		return nil, err
	}
	p, err := newPKI(dir, hosts)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

func newPKI(dir string, hosts []string) (*PKI, error) {
	p := &PKI{Dir: dir}
	var dnsNames []string
	var ips []net.IP
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dnsNames = append(dnsNames, h)
		}
	}
	if len(hosts) == 0 {
		dnsNames, ips = []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	} else {
		p.serverName = hosts[0]
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "dlock test CA " + filepath.Base(dir)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(48 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p.pool = x509.NewCertPool()
	p.pool.AddCert(ca)
	p.CAFile = filepath.Join(dir, "ca.pem")
	if err := writePEM(p.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, server bool) (certDER, keyDER []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		t := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(47 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if server {
			t.DNSNames, t.IPAddresses = dnsNames, ips
		}
		certDER, err = x509.CreateCertificate(rand.Reader, t, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		keyDER, err = x509.MarshalPKCS8PrivateKey(key)
		return certDER, keyDER, err
	}
	srvCert, srvKey, err := issue(2, "localhost", x509.ExtKeyUsageServerAuth, true)
	if err != nil {
		return nil, err
	}
	p.ServerCert, p.ServerKey, p.ServerKeyStore = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), filepath.Join(dir, "server-keystore.pem")
	cliCert, cliKey, err := issue(3, ClientName, x509.ExtKeyUsageClientAuth, false)
	if err != nil {
		return nil, err
	}
	p.ClientCert, p.ClientKey = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	for _, f := range []struct {
		path, kind string
		der        []byte
	}{
		{p.ServerCert, "CERTIFICATE", srvCert}, {p.ServerKey, "PRIVATE KEY", srvKey},
		{p.ClientCert, "CERTIFICATE", cliCert}, {p.ClientKey, "PRIVATE KEY", cliKey},
	} {
		if err := writePEM(f.path, f.kind, f.der); err != nil {
			return nil, err
		}
	}
	store := append(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: srvKey}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvCert})...)
	if err := os.WriteFile(p.ServerKeyStore, store, 0o600); err != nil {
		return nil, err
	}
	p.client, err = tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	return p, nil
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}

// ClientTLS returns a client configuration that trusts the PKI's CA and presents
// its client certificate (verifying the server as NewPKIFor's first host, if any).
func (p *PKI) ClientTLS() *tls.Config {
	return &tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{p.client}, MinVersion: tls.VersionTLS12, ServerName: p.serverName}
}

// URLQuery returns the TLS query parameters of a lock URL (backends/internal/tlsurl) that
// trusts the PKI's CA, presents its client certificate, and verifies the server
// as "localhost".
func (p *PKI) URLQuery() string {
	return "tls_ca=" + url.QueryEscape(p.CAFile) + "&tls_cert=" + url.QueryEscape(p.ClientCert) +
		"&tls_key=" + url.QueryEscape(p.ClientKey) + "&tls_server_name=localhost"
}

// mounts is what a server in a container needs mounted to read the PKI's files (at
// their own paths): its directory, or nothing for a nil PKI.
func (p *PKI) mounts() []string {
	if p == nil {
		return nil
	}
	return []string{p.Dir}
}

// Close removes the PKI's directory.
func (p *PKI) Close() error { return os.RemoveAll(p.Dir) }
