const r={initialize(){},async render(){throw new Error("diagrams are not rendered in the playground")}};export{r as default};
