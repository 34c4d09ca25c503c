package sqlite

// GraphsNamedQuery is the query GraphsNamed runs.
const GraphsNamedQuery = graphsNamedQuery
