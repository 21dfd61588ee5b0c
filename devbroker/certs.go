package devbroker

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
	"os"
	"path/filepath"
	"time"
)

// CA is a throwaway certificate authority for a TLS broker and its
// clients: for tests and local development only.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, PEM-encoded: what clients trust.
	PEM []byte
}

// NewCA returns a new CA named name, valid from an hour ago for a day.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devbroker: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("devbroker: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Pool returns a pool holding the CA, for tls.Config.RootCAs or ClientCAs.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf describes a certificate for [CA.Issue].
type Leaf struct {
	// Hosts are the DNS names and IP addresses it is valid for.
	Hosts []string
	// Client makes it a client certificate; the zero value is a server's.
	Client bool
	// NotAfter is when it expires. Zero means in a day.
	NotAfter time.Time
}

// Issued is a certificate the CA signed, with its key.
type Issued struct {
	TLS     tls.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// Issue returns a certificate for l signed by the CA.
func (ca *CA) Issue(l Leaf) (*Issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devbroker: certificate key: %w", err)
	}
	notAfter := l.NotAfter
	if notAfter.IsZero() {
		notAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "devbroker"},
		NotBefore:    notAfter.Add(-48 * time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if l.Client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	for _, h := range l.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("devbroker: certificate: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	return &Issued{TLS: cert, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// WriteFiles writes the certificate and its key to dir as name.pem and
// name-key.pem (the key readable by the owner only) and returns their
// paths.
func (is *Issued) WriteFiles(dir, name string) (cert, key string, err error) {
	cert, key = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(cert, is.CertPEM, 0o644); err != nil {
		return "", "", fmt.Errorf("devbroker: %w", err)
	}
	if err := os.WriteFile(key, is.KeyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("devbroker: %w", err)
	}
	return cert, key, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

// TLSFiles is a throwaway CA, a server certificate for a broker and a
// client certificate, written to a folder as PEM files.
type TLSFiles struct {
	Dir string
	// CAFile is ca.pem: what clients trust (-tls-ca).
	CAFile string
	// ServerCert and ServerKey are server.pem and server-key.pem.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are client.pem and client-key.pem: a client
	// certificate the CA signed, for mutual TLS (-tls-cert, -tls-key).
	ClientCert, ClientKey string
	// Server is the broker's TLS configuration ([Config.TLS]); with
	// mutual it requires a client certificate the CA signed.
	Server *tls.Config
	// CA signs more certificates.
	CA *CA
}

// WriteTLSFiles makes a CA, a server certificate valid for hosts and a
// client certificate, writes them to dir (created if missing) and
// returns them.
func WriteTLSFiles(dir string, hosts []string, mutual bool) (*TLSFiles, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("devbroker: %w", err)
	}
	ca, err := NewCA("handoff devbroker CA")
	if err != nil {
		return nil, err
	}
	server, err := ca.Issue(Leaf{Hosts: hosts})
	if err != nil {
		return nil, err
	}
	client, err := ca.Issue(Leaf{Client: true})
	if err != nil {
		return nil, err
	}
	f := &TLSFiles{Dir: dir, CAFile: filepath.Join(dir, "ca.pem"), CA: ca}
	if err := os.WriteFile(f.CAFile, ca.PEM, 0o644); err != nil {
		return nil, fmt.Errorf("devbroker: %w", err)
	}
	if f.ServerCert, f.ServerKey, err = server.WriteFiles(dir, "server"); err != nil {
		return nil, err
	}
	if f.ClientCert, f.ClientKey, err = client.WriteFiles(dir, "client"); err != nil {
		return nil, err
	}
	f.Server = &tls.Config{Certificates: []tls.Certificate{server.TLS}, MinVersion: tls.VersionTLS12}
	if mutual {
		f.Server.ClientAuth = tls.RequireAndVerifyClientCert
		f.Server.ClientCAs = ca.Pool()
	}
	return f, nil
}
