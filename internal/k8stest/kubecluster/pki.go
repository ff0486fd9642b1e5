package kubecluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the cluster's own CA, the apiserver's serving certificate signed
// by it, and the service-account signing key.
type pki struct {
	caCert, caFile       string
	certFile, keyFile    string
	saKeyFile, saPubFile string
}

// makePKI writes the cluster's keys and certificates into dir. The serving
// certificate names the addresses clients reach the apiserver at, so they
// verify it against the CA.
func makePKI(dir string, ips []net.IP, names []string) (pki, error) {
	p := pki{
		caFile:    filepath.Join(dir, "ca.crt"),
		certFile:  filepath.Join(dir, "apiserver.crt"),
		keyFile:   filepath.Join(dir, "apiserver.key"),
		saKeyFile: filepath.Join(dir, "sa.key"),
		saPubFile: filepath.Join(dir, "sa.pub"),
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return p, err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	ca := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "amelia-kube-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return p, fmt.Errorf("make the cluster's CA: %w", err)
	}
	ca, _ = x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	leaf := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  ips,
		DNSNames:     names,
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return p, fmt.Errorf("make the apiserver's certificate: %w", err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	p.caCert = string(pemBlock("CERTIFICATE", caDER))
	files := map[string][]byte{
		p.caFile:    pemBlock("CERTIFICATE", caDER),
		p.certFile:  pemBlock("CERTIFICATE", leafDER),
		p.keyFile:   ecKeyPEM(key),
		p.saKeyFile: ecKeyPEM(saKey),
		p.saPubFile: pubKeyPEM(&saKey.PublicKey),
	}
	for name, b := range files {
		if err := os.WriteFile(name, b, 0o600); err != nil {
			return p, err
		}
	}
	return p, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func ecKeyPEM(k *ecdsa.PrivateKey) []byte {
	der, _ := x509.MarshalECPrivateKey(k)
	return pemBlock("EC PRIVATE KEY", der)
}

func pubKeyPEM(k *ecdsa.PublicKey) []byte {
	der, _ := x509.MarshalPKIXPublicKey(k)
	return pemBlock("PUBLIC KEY", der)
}

// token is a random bearer token for the apiserver's token file.
func token() string {
	var b [24]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// kubeconfig is a kubeconfig that reaches server as the holder of tok,
// verifying the server against caPEM.
func kubeconfig(server, caPEM, user, tok string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: amelia-kube
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: amelia-kube
  context: {cluster: amelia-kube, user: %s}
current-context: amelia-kube
`, server, base64.StdEncoding.EncodeToString([]byte(caPEM)), user, tok, user)
}
