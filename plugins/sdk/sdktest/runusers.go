package sdktest

import (
	"fmt"
	"strings"
	"time"
)

// runUser is the uid the RunUsers case runs as: in the range Amelia gives
// runs, and no user of any image the kit knows.
const runUser = "60123"

// runUsers checks the RunUsers capability where the provider declares it:
// an exec with User "60123" runs as that uid (and "60123:60123" with that
// group too), though no user of the sandbox has it; cancelling such an
// exec ends its whole tree, as it does for the default user.
func (k *kit) runUsers(t T) {
	if !k.info.RunUsers {
		t.Skipf("the provider does not declare RunUsers; nothing to check")
	}
	ctx := k.ctx(t)
	for _, user := range []string{runUser, runUser + ":" + runUser} {
		req := sh(`echo "$(id -u):$(id -g)"`)
		req.User = user
		r := k.run(ctx, t, k.in(k.sb, req), nil)
		got := strings.TrimSpace(string(r.stdout))
		if user == runUser {
			got, _, _ = strings.Cut(got, ":") // the group is the provider's choice
		}
		if r.st.Code != 0 || got != user {
			t.Errorf("exec as %q: exit %+v, id %q (stderr %q), want %q", user, r.st, got, r.stderr, user)
		}
	}

	// A tree of the uid's, one of them out of the exec's group (setsid),
	// that would write the marker if it outlived the cancel. The marker goes
	// where any uid may write.
	marker := fmt.Sprintf("/tmp/sdktest-runusers-%d", time.Now().UnixNano())
	req := sh(`echo $$; sh -c 'echo $$; sleep 600; echo survived > ` + marker + `' & setsid sh -c 'echo $$; sleep 600; echo survived >> ` + marker + `' & wait`)
	req.User = runUser
	k.cancelEndsTree(t, req, 3, marker, "an exec as uid "+runUser)
	rm := sh(`rm -f ` + marker)
	rm.User = runUser
	k.run(ctx, t, k.in(k.sb, rm), nil)
}
