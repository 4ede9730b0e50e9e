// Command mockoidc serves github.com/oauth2-proxy/mockoidc, a minimal OpenID Connect provider
// for tests, on a given address over plain HTTP.
//
// Once it listens it prints one JSON line on stdout,
//
//	{"issuer":"http://127.0.0.1:PORT/oidc","client_id":"…","client_secret":"…"}
//
// and then serves until it is killed. The discovery document is at
// <issuer>/.well-known/openid-configuration.
//
// Who logs in: every call of the authorize endpoint (/oidc/authorize) logs in a user with the
// email of -email (default jane.doe@example.com), or, when the call carries a login_hint
// parameter, with that email. The user's subject is its email and its preferred_username the
// part of the email before '@'; groups come from -groups.
//
//	mockoidc -addr 127.0.0.1:0 [-client-id ID] [-client-secret SECRET] [-email E] [-groups a,b]
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/oauth2-proxy/mockoidc"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on (port 0: any free port)")
	clientID := flag.String("client-id", "", "OAuth client id (default: random)")
	clientSecret := flag.String("client-secret", "", "OAuth client secret (default: random)")
	email := flag.String("email", "jane.doe@example.com", "email of the user who logs in when the authorize request has no login_hint")
	groups := flag.String("groups", "engineering,design", "comma-separated groups of the user who logs in")
	flag.Parse()

	m, err := mockoidc.NewServer(nil)
	if err != nil {
		log.Fatal(err)
	}
	if *clientID != "" {
		m.ClientID = *clientID
	}
	if *clientSecret != "" {
		m.ClientSecret = *clientSecret
	}

	// The library pops the user of each login off a queue: queue the chosen user right before
	// the authorize handler runs, one login at a time so that concurrent logins don't swap users.
	var mu sync.Mutex
	err = m.AddMiddleware(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != mockoidc.AuthorizationEndpoint {
				next.ServeHTTP(w, r)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			m.UserQueue.Lock() // drop a user left by a login that failed before it took one
			m.UserQueue.Queue = nil
			m.UserQueue.Unlock()
			m.QueueUser(user(r.FormValue("login_hint"), *email, *groups))
			next.ServeHTTP(w, r)
		})
	})
	if err != nil {
		log.Fatal(err)
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	if err := m.Start(ln, nil); err != nil {
		log.Fatal(err)
	}
	line, _ := json.Marshal(map[string]string{
		"issuer":        m.Issuer(),
		"client_id":     m.ClientID,
		"client_secret": m.ClientSecret,
	})
	os.Stdout.Write(append(line, '\n'))
	select {} // serve until killed
}

// user is the mock user for a login: hint when set, else fallback, as the email.
func user(hint, fallback, groups string) *mockoidc.MockUser {
	email := hint
	if email == "" {
		email = fallback
	}
	u := mockoidc.DefaultUser()
	u.Subject = email
	u.Email = email
	u.PreferredUsername, _, _ = strings.Cut(email, "@")
	u.Groups = nil
	if groups != "" {
		u.Groups = strings.Split(groups, ",")
	}
	return u
}
