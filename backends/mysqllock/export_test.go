package mysqllock

// OwnDB makes Close close the *sql.DB given to New or NewGetLock too, as the URL
// openers' Lockers do. The conformance harness opens a pool per client: pools left
// open until the test ended kept their connections, and a property's 20 trials
// (the full campaign's) ran the server out of them (Error 1040).
func OwnDB() Option {
	return func(o *options) { o.config.ownDB, o.getLockConfig.ownDB = true, true }
}
